"""The results file: one JSON object per (transformers version, device kind), rewritten atomically
after every architecture so that an interrupted run loses nothing it finished.

Schema (``SCHEMA_VERSION`` 1)::

    {"schema_version": 1, "transformers_version": str, "torch_version": str, "hf_neuron_version": str,
     "device_kind": "simulated" | "trainium" | "cpu", "generated_at": ISO-8601 UTC,
     "architectures": [
        {"model_type": str, "rank": int | null, "tier": str | null, "kind": str,
         "model_class": str | null,
         "levels": {"L1": "pass" | "fail" | "skip", ..., "L5": ...},
         "graphs_compiled": {"L3": int | null, "L4": int | null},
         "timings": {"L1": seconds, ..., "total": seconds},
         "failure": null | {"level": "L<n>", "reason": str, "op": str | null},
         "failures": {"L<n>": {"reason": str, "op": str | null}, ...},
         "skip_reasons": {"L<n>": str, ...},
         "details": {"L<n>": {...}, ...}}]}

A ``--all`` sweep also records ``"causal_lm_types": [str, ...]``, every ``model_type`` of the installed
Transformers' causal-LM mapping: the denominator of the all-types headline (:func:`summarize_all_types`).

``failure`` is the first failing level (the one that decides the headline); ``failures`` holds every
failing level's reason. ``details["L3"]["path"]`` is ``"compiled"`` or ``"eager"`` (generate compiled
no graph; ``eager_reason`` says why). Only compiled L3 passes count in the headline; eager ones are
counted on their own ("runs, uncompiled"). A results file written before this record had no path
(its L3 was a single prompt) is read with the path inferred from its graph count.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from pathlib import Path

SCHEMA_VERSION = 1
LEVELS = ("L1", "L2", "L3", "L4", "L5")
STATUSES = ("pass", "fail", "skip")
HEADLINE_LEVELS = ("L1", "L2", "L3")
NOT_REQUESTED = "level not requested in this run"
#: What a results file records (``task``; absent means text generation).
TASK_TEXT, TASK_IMAGES = "text-generation", "image-text-to-text"
REASON_MAX_CHARS = 400


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def trim(text: str, limit: int = REASON_MAX_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def results_filename(transformers_version: str, device_kind: str) -> str:
    return f"{transformers_version}-{device_kind}.json"


def new_results(transformers_version: str, torch_version: str, device_kind: str) -> dict:
    from hf_neuron import __version__

    return {
        "schema_version": SCHEMA_VERSION,
        "transformers_version": transformers_version,
        "torch_version": torch_version,
        "hf_neuron_version": __version__,
        "device_kind": device_kind,
        "generated_at": utc_now(),
        "architectures": [],
    }


def new_record(spec) -> dict:
    return {
        "model_type": spec.model_type,
        "rank": spec.rank,
        "tier": spec.tier,
        "kind": spec.kind,
        "model_class": None,
        "levels": {},
        "graphs_compiled": {"L3": None, "L4": None},
        "timings": {},
        "failure": None,
        "failures": {},
        "skip_reasons": {},
        "details": {},
    }


def set_level(record: dict, level: str, status: str, *, reason: str | None = None, op: str | None = None,
              details: dict | None = None, seconds: float | None = None) -> None:
    """Record one level's outcome, keeping ``failure`` on the first failing level."""
    assert level in LEVELS and status in STATUSES, (level, status)
    record["levels"][level] = status
    record["failures"].pop(level, None)
    record["skip_reasons"].pop(level, None)
    if status == "fail":
        record["failures"][level] = {"reason": trim(reason or "failed"), "op": trim(op, 200) if op else None}
    elif status == "skip":
        record["skip_reasons"][level] = trim(reason or "skipped")
    if details is not None:
        record["details"][level] = details
    if seconds is not None:
        record["timings"][level] = round(seconds, 3)
    refresh_failure(record)


def refresh_failure(record: dict) -> None:
    first = next((lv for lv in LEVELS if lv in record["failures"]), None)
    record["failure"] = None if first is None else {"level": first, **record["failures"][first]}


def order_levels(record: dict) -> None:
    record["levels"] = {lv: record["levels"][lv] for lv in LEVELS if lv in record["levels"]}


def missing_levels(record: dict | None, requested: tuple[str, ...] | list[str]) -> list[str]:
    """Requested levels the record has no outcome for (a level skipped only because it was not
    requested in an earlier run counts as missing)."""
    if record is None:
        return list(requested)
    out = []
    for lv in requested:
        status = record["levels"].get(lv)
        if status is None or (status == "skip" and record["skip_reasons"].get(lv) == NOT_REQUESTED):
            out.append(lv)
    return out


def has_failure(record: dict) -> bool:
    return any(status == "fail" for status in record["levels"].values())


def passes(record: dict, levels=HEADLINE_LEVELS) -> bool:
    return all(record["levels"].get(lv) == "pass" for lv in levels)


def generation_path(record: dict) -> str | None:
    """``"compiled"`` or ``"eager"`` for a record whose L3 ran, else None."""
    if record["levels"].get("L3") not in ("pass", "fail"):
        return None
    path = record.get("details", {}).get("L3", {}).get("path")
    if path is None and record["levels"]["L3"] == "pass":  # results written before paths were recorded
        path = "compiled" if record.get("graphs_compiled", {}).get("L3") else "eager"
    return path


def passes_uncompiled(record: dict) -> bool:
    """L3 passed with generation that compiled nothing (counted apart from the headline)."""
    return record["levels"].get("L3") == "pass" and generation_path(record) == "eager"


def passes_compiled(record: dict, levels=HEADLINE_LEVELS) -> bool:
    """The levels pass, and generation (when L3 is among them) ran compiled."""
    return passes(record, levels) and ("L3" not in levels or generation_path(record) == "compiled")


def _sort_key(record: dict):
    return (record.get("rank") is None, record.get("rank") or 0, record["model_type"])


def upsert(results: dict, record: dict) -> None:
    archs = [r for r in results["architectures"] if r["model_type"] != record["model_type"]]
    archs.append(record)
    archs.sort(key=_sort_key)
    results["architectures"] = archs


def by_model_type(results: dict) -> dict[str, dict]:
    return {r["model_type"]: r for r in results.get("architectures", [])}


def write_atomic(path: Path, results: dict) -> None:
    """Write ``results`` to ``path`` so that a reader (or a crash) never sees a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    results["generated_at"] = utc_now()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(results, fh, indent=1, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load(path: Path) -> dict:
    with open(path) as fh:
        results = json.load(fh)
    errors = validate(results)
    if errors:
        raise ValueError(f"{path} is not a compatibility results file: " + "; ".join(errors[:5]))
    return results


def validate(results: dict) -> list[str]:
    """Schema check; returns a list of problems (empty when valid)."""
    errors = []
    if not isinstance(results, dict):
        return ["top level is not an object"]
    for key, typ in (("transformers_version", str), ("torch_version", str), ("device_kind", str),
                     ("generated_at", str), ("architectures", list)):
        if not isinstance(results.get(key), typ):
            errors.append(f"{key} missing or not a {typ.__name__}")
    if results.get("task", TASK_TEXT) not in (TASK_TEXT, TASK_IMAGES):
        errors.append(f"task must be {TASK_TEXT!r} or {TASK_IMAGES!r}")
    types = results.get("causal_lm_types")
    if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
        errors.append("causal_lm_types must be a list of model_type names")
    for rec in results.get("architectures") or []:
        if not isinstance(rec, dict):
            errors.append("an architecture is not an object")
            continue
        name = rec.get("model_type")
        if not isinstance(name, str):
            errors.append("an architecture has no model_type")
            continue
        rank = rec.get("rank")
        if rank is not None and not (isinstance(rank, int) and 1 <= rank <= 100):
            errors.append(f"{name}: rank {rank!r} not in 1-100 or null")
        levels = rec.get("levels")
        if not isinstance(levels, dict) or any(lv not in LEVELS or st not in STATUSES for lv, st in levels.items()):
            errors.append(f"{name}: levels must map L1-L5 to pass|fail|skip")
        for key in ("graphs_compiled", "timings", "failures", "skip_reasons", "details"):
            if not isinstance(rec.get(key), dict):
                errors.append(f"{name}: {key} missing")
        failure = rec.get("failure")
        if failure is not None and not (isinstance(failure, dict) and failure.get("level") in LEVELS
                                        and isinstance(failure.get("reason"), str) and "op" in failure):
            errors.append(f"{name}: failure must be null or {{level, reason, op}}")
        if isinstance(levels, dict) and any(st == "fail" for st in levels.values()) and failure is None:
            errors.append(f"{name}: a failing level without a failure reason")
    return errors


def is_moe(rec: dict) -> bool:
    """A mixture-of-experts architecture: L1 counted its routed experts (or L5 described them)."""
    details = rec.get("details") or {}
    return bool((details.get("L1") or {}).get("routed_experts") or (details.get("L5") or {}).get("experts"))


def experts_split(experts: dict, ranks: int) -> bool:
    """Each of ``ranks`` ranks holds only its share of the routed experts' weights (``experts``: L5's record)."""
    return experts["expert_weights_per_rank"] <= 1 / ranks + 1e-3


def experts_sharded(rec: dict) -> bool:
    """L5 passed with each rank holding only its share of the routed experts' weights."""
    l5 = (rec.get("details") or {}).get("L5") or {}
    experts = l5.get("experts")
    return rec["levels"].get("L5") == "pass" and bool(experts) and experts_split(experts, l5.get("tp_size") or 2)


def _moe_counts(records: list[dict]) -> dict:
    moe = [r for r in records if is_moe(r)]
    return {"moe_types": len(moe), "moe_sharded": sum(experts_sharded(r) for r in moe)}


def summarize(results: dict) -> dict:
    """Headline and per-level counts over the ranked entries (the top-100 denominator)."""
    ranked = [r for r in results["architectures"] if r.get("rank") is not None]
    per_level = {lv: {st: 0 for st in STATUSES} for lv in LEVELS}
    for rec in ranked:
        for lv in LEVELS:
            st = rec["levels"].get(lv)
            if st in STATUSES:
                per_level[lv][st] += 1
    cumulative = {}
    for i, lv in enumerate(LEVELS[:4]):
        cumulative[lv] = sum(passes_compiled(r, LEVELS[: i + 1]) for r in ranked)
    uncompiled = [r for r in ranked if passes_uncompiled(r)]
    return {
        "ranked_tested": len(ranked),
        "headline": sum(passes_compiled(r) for r in ranked),
        "runs_uncompiled": sum(passes(r) for r in uncompiled),
        "l3_uncompiled": len(uncompiled),
        "per_level": per_level,
        "cumulative": cumulative,
        "all_tested": len(results["architectures"]),
        "all_headline": sum(passes_compiled(r) for r in results["architectures"]),
        **_moe_counts(ranked),
    }


def summarize_all_types(results: dict) -> dict | None:
    """The all-types headline of a ``--all`` sweep, None for a file without one.

    The denominator is the recorded ``causal_lm_types`` (the causal-LM mapping of the release the
    sweep ran on), ranked or not; a type of the mapping without a record counts as not running.
    Multimodal-only and remote-code entries of the ranked list are not in the mapping and not counted.
    """
    types = results.get("causal_lm_types")
    if not types:
        return None
    records = [r for r in results["architectures"] if r["model_type"] in set(types)]
    l5_tested = [r for r in records if r["levels"].get("L5") in ("pass", "fail")]
    compiled = sum(passes_compiled(r) for r in records)
    return {
        "types": len(types),
        "tested": len(records),
        "compiled": compiled,
        "percent": round(100 * compiled / len(types), 1),
        "uncompiled": sum(passes(r) for r in records if passes_uncompiled(r)),
        "l1_l4": sum(passes_compiled(r, LEVELS[:4]) for r in records),
        "l5_pass": sum(r["levels"]["L5"] == "pass" for r in l5_tested),
        "l5_tested": len(l5_tested),
        "failing": sorted(r["model_type"] for r in records if not passes(r)),
        **_moe_counts(records),
    }

"""Audit: build every causal-LM architecture of the installed Transformers as a tiny model.

For each ``model_type``: tiny config -> model -> one CPU forward -> 3-token greedy generate, with a
pass/fail row and the reason. ``python -m hf_neuron.tiny_models --audit [--only a,b]
[--ranked hf_neuron/compat/data/top100-text-generation.tsv] [--json out.json]``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import signal
import sys
import threading
import time
import traceback
import warnings


@contextlib.contextmanager
def _time_limit(seconds: int):
    if seconds <= 0 or not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise TimeoutError(f"took longer than {seconds}s")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _short_reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    text = re.sub(r"\s+", " ", text)
    return text[:300]


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if "transformers" in frame.filename:
            return f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
    return ""


def _check_roundtrip(model, config, model_type, input_ids, attention_mask, logits) -> None:
    """write_checkpoint, then the Auto class and model_class_for(...).from_pretrained (offline) both load
    every weight and give the same logits."""
    import os
    import tempfile

    import torch

    from .factory import auto_class_for, model_class_for, write_checkpoint

    loaded = []
    with tempfile.TemporaryDirectory(prefix="tiny-audit-") as tmp:
        write_checkpoint(model, config, tmp, model_type=model_type)
        previous = os.environ.get("HF_HUB_OFFLINE")
        os.environ["HF_HUB_OFFLINE"] = "1"
        try:
            for cls in (auto_class_for(model_type), model_class_for(model_type)):
                reloaded, info = cls.from_pretrained(tmp, output_loading_info=True)
                missing = sorted(info.get("missing_keys") or [])
                if missing:
                    raise AssertionError(f"{cls.__name__}.from_pretrained misses weights: {', '.join(missing[:5])}")
                loaded.append(reloaded.eval())
        finally:
            if previous is None:
                os.environ.pop("HF_HUB_OFFLINE", None)
            else:
                os.environ["HF_HUB_OFFLINE"] = previous
    for reloaded in loaded:
        with torch.no_grad():
            out = reloaded(input_ids=input_ids, attention_mask=attention_mask)
        again = out.logits if hasattr(out, "logits") else out[0]
        if again.shape != logits.shape or not torch.equal(again, logits):
            diff = (again - logits).abs().max().item() if again.shape == logits.shape else "shape"
            raise AssertionError(f"reloaded {type(reloaded).__name__} gives different logits (max diff {diff})")


def audit_one(model_type: str, *, seed: int = 0, timeout: int = 120, roundtrip: bool = True) -> dict:
    """Build, forward and generate one tiny model; return a result row (never raises)."""
    import torch

    from .configs import default_config, tiny_config
    from .factory import build_model, count_parameters, is_multimodal_text_only
    from .tokenizer import VOCAB_SIZE

    row = {"model_type": model_type, "status": "fail", "stage": "config", "reason": "", "where": "",
           "parameters": None, "layers": None, "seconds": None, "multimodal_text_only":
               is_multimodal_text_only(model_type)}
    start = time.perf_counter()
    try:
        with _time_limit(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = tiny_config(model_type, seed=seed)
            row["shape"] = describe_config(config)
            row["layers"] = row["shape"].get("layers")
            lost = _kinds_lost(default_config(model_type), row["shape"])
            if lost:
                row["shape"].setdefault("checks", []).append(f"layer kinds lost: {lost}")
            row["stage"] = "model"
            row["parameters"] = count_parameters(config, model_type)
            model = build_model(model_type, seed=seed, config=config)
            row["class"] = type(model).__name__
            row["stage"] = "forward"
            gen = torch.Generator().manual_seed(seed)
            input_ids = torch.randint(16, VOCAB_SIZE, (2, 8), generator=gen)
            attention_mask = torch.ones_like(input_ids)
            attention_mask[1, :3] = 0  # left padding in the second row
            with torch.no_grad():
                out = model(input_ids=input_ids, attention_mask=attention_mask)
            logits = out.logits if hasattr(out, "logits") else out[0]
            if not torch.isfinite(logits).all():
                raise FloatingPointError("non-finite logits")
            row["stage"] = "generate"
            with torch.no_grad():
                generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=3,
                                           do_sample=False, pad_token_id=0)
            if generated.shape[-1] != input_ids.shape[-1] + 3:
                raise AssertionError(f"generate returned shape {tuple(generated.shape)}")
            if roundtrip:
                row["stage"] = "roundtrip"
                _check_roundtrip(model, config, model_type, input_ids, attention_mask, logits)
            row["status"] = "pass"
            row["stage"] = "done"
    except BaseException as exc:  # noqa: BLE001 - one row per architecture, whatever happens
        if isinstance(exc, KeyboardInterrupt):
            raise
        row["reason"] = _short_reason(exc)
        row["where"] = _where(exc)
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


_SHAPE_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers"),
    "hidden": ("hidden_size", "d_model", "n_embd"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "decoder_attention_heads", "num_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "kv_n_heads"),
    "head_dim": ("head_dim",),
    "intermediate": ("intermediate_size", "ffn_dim", "n_inner", "decoder_ffn_dim", "ffn_hidden_size"),
    "moe_intermediate": ("moe_intermediate_size", "expert_ffn_hidden_size"),
    "experts": ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"),
    "top_k": ("num_experts_per_tok", "moe_topk", "moe_top_k", "moe_k", "num_experts_per_token", "top_k"),
    "sliding_window": ("sliding_window", "window_size", "attention_window_size", "attention_chunk_size"),
    "max_positions": ("max_position_embeddings", "n_positions", "max_seq_len"),
}
_KIND_KEYS = ("layer_types", "mlp_layer_types", "layers_block_type", "block_types", "attention_layers",
              "hybrid_override_pattern")


def _text_config(config):
    try:
        return config.get_text_config()
    except Exception:  # several valid text configs (audio models): use the top level
        return config


def describe_config(config) -> dict:
    """The tiny text config's shape (layers, widths, kinds of layer) and divisibility checks."""
    text = _text_config(config)
    d = text.to_dict()
    shape: dict = {}
    for name, keys in _SHAPE_KEYS.items():
        for key in keys:
            if isinstance(d.get(key), int) and not isinstance(d.get(key), bool):
                shape[name] = d[key]
                break
    kinds = {}
    for key in _KIND_KEYS:
        value = d.get(key)
        if isinstance(value, (list, str)) and value:
            kinds[key] = sorted({str(v) for v in value})
    if kinds:
        shape["kinds"] = kinds
    if d.get("per_layer_config"):
        shape["per_layer_config"] = d["per_layer_config"]
    checks = []
    for key in ("heads", "kv_heads"):
        if key in shape and shape[key] > 1 and shape[key] % 2:
            checks.append(f"{key}={shape[key]} not divisible by 2")
    for key in ("intermediate", "moe_intermediate"):
        if key in shape and shape[key] % 4:
            checks.append(f"{key}={shape[key]} not divisible by 4")
    if "max_positions" in shape and shape["max_positions"] < 2048:
        checks.append(f"max_positions={shape['max_positions']} < 2048")
    if "experts" in shape and "top_k" in shape and shape["top_k"] > shape["experts"]:
        checks.append("top_k > experts")
    if checks:
        shape["checks"] = checks
    return shape


def _kinds_lost(default, tiny_shape: dict) -> dict:
    original = describe_config(default).get("kinds", {})
    tiny = tiny_shape.get("kinds", {})
    return {k: sorted(set(v) - set(tiny.get(k, []))) for k, v in original.items() if set(v) - set(tiny.get(k, []))}


def read_ranked(path: str) -> list[str]:
    """model_types of a ranked TSV (``rank<TAB>model_type<TAB>...`` with a header row)."""
    types = []
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        col = header.index("model_type") if "model_type" in header else 1
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) > col and parts[col]:
                types.append(parts[col])
    return types


def _group(reason: str) -> str:
    reason = re.sub(r"\b\d+\b", "N", reason)
    return reason[:120]


def run_audit(model_types: list[str] | None = None, *, ranked: str | None = None, json_path: str | None = None,
              timeout: int = 120, roundtrip: bool = True, out=sys.stdout) -> list[dict]:
    from transformers.utils import logging as hf_logging

    from .configs import known_model_types

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    types = model_types or known_model_types()
    ranked_types = read_ranked(ranked) if ranked else []
    for extra in ranked_types:
        if extra not in types and not model_types:
            types.append(extra)
    rows = []
    for i, model_type in enumerate(types, 1):
        row = audit_one(model_type, timeout=timeout, roundtrip=roundtrip)
        rows.append(row)
        flag = " [multimodal text-only]" if row["multimodal_text_only"] else ""
        params = f"{row['parameters']:,}" if row["parameters"] else "-"
        detail = "" if row["status"] == "pass" else f" @{row['stage']}: {row['reason']}"
        print(f"[{i}/{len(types)}] {model_type:28s} {row['status']:4s} params={params} "
              f"layers={row['layers']} {row['seconds']}s{flag}{detail}", file=out, flush=True)

    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    causal = [r for r in rows if r["model_type"] in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES]
    passed = sum(r["status"] == "pass" for r in causal)
    print(f"\ncausal-LM mapping: {passed} of {len(causal)} pass", file=out)
    if ranked_types:
        by_type = {r["model_type"]: r for r in rows}
        top = [by_type.get(t) for t in ranked_types]
        top_pass = sum(1 for r in top if r and r["status"] == "pass")
        print(f"ranked list ({ranked}): {top_pass} of {len(ranked_types)} pass", file=out)
        failing = [t for t, r in zip(ranked_types, top) if not r or r["status"] != "pass"]
        if failing:
            print("  not passing: " + ", ".join(failing), file=out)
    groups = collections.defaultdict(list)
    for r in rows:
        if r["status"] != "pass":
            groups[(r["stage"], _group(r["reason"]))].append(r["model_type"])
    if groups:
        print("\nfailures by reason:", file=out)
        for (stage, reason), members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  [{len(members)}] @{stage} {reason}\n      {', '.join(members)}", file=out)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    return rows

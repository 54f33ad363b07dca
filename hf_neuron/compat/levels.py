"""The five compatibility levels, run inside one worker process for one architecture.

Every level compares the device against a CPU reference of the same tiny model (same checkpoint on
disk, loaded twice):

- L1 builds the tiny model (``hf_neuron.tiny_models``) and loads it with
  ``device_map=<device>``; every parameter and buffer must land on the device.
- L2 eager forward: logits within a tight tolerance of CPU.
- L3 greedy ``generate`` with the Neuron defaults (static cache, prefill chunking, compiled with
  backend "neuron") of prompts that span one to three prefill chunks with different remainders, at
  batch 1 and batch 2 (left-padded), gives exactly the CPU eager tokens and compiles at most 2 graphs
  per (batch size, ``max_cache_len``) (one prefill chunk, one decode step). The path is recorded:
  ``compiled``, or ``eager`` with the reason generate did not compile.
- L4 one training step, eager and compiled: loss and gradients within tolerance of CPU; graphs recorded.
- L5 (``hf_neuron.compat.tp_worker``) tensor parallel TP=2 under torchrun equals a single device.
"""

from __future__ import annotations

import gc
import re
import time
import traceback
from pathlib import Path
from typing import Callable

from hf_neuron.compat import frames as frames_of
from hf_neuron.compat import results as R
from hf_neuron.compat.archs import KIND_MULTIMODAL, KIND_REMOTE_CODE, ArchSpec
from hf_neuron.graphs import count_graphs

NEW_TOKENS = 8
# L3's workload: a small cache and chunk (passed to generate as a user would) so that tiny prompts
# span one, two and three chunks, each leaving a different remainder; every padded prompt plus the
# new tokens fits the cache. Batch 2 left-pads pairs of them.
L3_PREFILL_CHUNK, L3_MAX_CACHE_LEN = 16, 64
L3_PROMPT_LENGTHS = (7, 20, 41)
L3_BATCHES = tuple((n,) for n in L3_PROMPT_LENGTHS) + tuple(zip(L3_PROMPT_LENGTHS[1:], L3_PROMPT_LENGTHS[:-1]))
L3_GRAPHS_PER_SHAPE = 2
#: How L3 checks, written into each results file (the report names it).
L3_CHECK = (f"greedy generate of prompts of {', '.join(map(str, L3_PROMPT_LENGTHS))} tokens at batch 1 and "
            f"(left-padded pairs) batch 2, max_cache_len {L3_MAX_CACHE_LEN}, prefill chunk {L3_PREFILL_CHUNK}: "
            f"tokens equal CPU, at most {L3_GRAPHS_PER_SHAPE} graphs per batch size")
PATH_COMPILED, PATH_EAGER = "compiled", "eager"
FORWARD_BATCH, FORWARD_LEN = 2, 12

LOGITS_RTOL, LOGITS_ATOL = 1e-4, 1e-4
LOSS_RTOL = 1e-5
GRAD_RTOL, GRAD_ATOL = 1e-3, 1e-6

_ATEN_OP = re.compile(r"aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")
_DYNAMO_INNER = re.compile(r"got (\w+(?:Error|Exception))\((['\"])(.*?)\2\)", re.S)
_DYNAMO_CALL = re.compile(r"call_function (?:<built-in function |<function )?([A-Za-z0-9_.]+)")
_STOCHASTIC_ATTRS = ("dropout", "pdrop", "jitter")


class LevelFailure(Exception):
    """A level's check failed (not a crash): ``reason`` says what differs, ``op`` where."""

    def __init__(self, reason: str, op: str | None = None):
        super().__init__(reason)
        self.reason, self.op = reason, op
        self.details: dict | None = None  # what the level measured before it failed, recorded with the failure

    @classmethod
    def with_details(cls, details: dict, reason: str, op: str | None = None) -> "LevelFailure":
        failure = cls(reason, op)
        failure.details = details
        return failure


def describe_exception(exc: BaseException, stage: str | None = None) -> tuple[str, str | None]:
    """(reason, op) for an exception: the type and first lines of the message; the failing aten op
    when the message names one, else the innermost frame in transformers or hf_neuron (not this harness)."""
    if isinstance(exc, LevelFailure):
        return exc.reason, exc.op
    message = str(exc).strip()
    lines = [ln for ln in message.splitlines() if ln.strip()]
    head = " ".join(lines[:3]) if lines else ""
    # Dynamo wraps the real error of a traced call: "... call_function <fn>(...): got XError('...')".
    inner = _DYNAMO_INNER.search(message)
    if inner:
        head = f"{inner.group(1)}: {inner.group(3)}"
    reason = f"{type(exc).__name__}: {head}" if head else type(exc).__name__
    if stage:
        reason = f"{stage}: {reason}"
    match = _ATEN_OP.search(message)
    if match:
        return reason, match.group(0)
    traced = _DYNAMO_CALL.search(message)
    if traced:
        return reason, f"{traced.group(1)} (traced by Dynamo)"
    frames = traceback.extract_tb(exc.__traceback__)
    chosen = None
    for frame in frames:
        if frames_of.is_library_or_adapter(frame.filename):
            chosen = frame
    if chosen is None and frames:
        chosen = frames[-1]
    if chosen is None:
        return reason, None
    return reason, f"{frames_of.short_path(chosen.filename)}:{chosen.lineno} in {chosen.name}"


def _neuron_generation_defaults_active() -> bool:
    try:
        from hf_neuron.patching import all_fixes
    except ImportError:
        return False
    return any(f.name == "generate-neuron-defaults" and f.active for f in all_fixes())


def _reset_compiler() -> None:
    """Forget compiled graphs between levels and architectures (guards, caches, counters)."""
    import sys

    if "torch._dynamo" in sys.modules:  # nothing compiled yet otherwise (and the fake archs stay torch-free)
        sys.modules["torch._dynamo"].reset()


def _zero_stochastic(obj) -> None:
    """Make a training step deterministic on both sides: dropout (modules, module attributes and
    config values read at forward time) and router jitter set to 0."""
    import torch

    configs = []
    for module in obj.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if isinstance(value, float) and value > 0 and any(k in name.lower() for k in _STOCHASTIC_ATTRS):
                setattr(module, name, 0.0)
        config = getattr(module, "config", None)
        if config is not None and all(config is not c for c in configs):
            configs.append(config)
    seen = []
    while configs:
        config = configs.pop()
        if any(config is c for c in seen):
            continue
        seen.append(config)
        for name, value in list(vars(config).items()):
            if isinstance(value, float) and value > 0 and any(k in name.lower() for k in _STOCHASTIC_ATTRS):
                setattr(config, name, 0.0)
            elif hasattr(value, "to_dict") and hasattr(value, "model_type"):
                configs.append(value)


class ArchRun:
    """Holds the state shared by the levels of one architecture (models, inputs, references)."""

    def __init__(self, spec: ArchSpec, device: str, workdir: Path, emit: Callable[[dict], None]):
        self.spec, self.device, self.workdir, self.emit = spec, device, Path(workdir), emit
        self.record = R.new_record(spec)
        self.cpu_model = None
        self.dev_model = None
        self.model_dir: Path | None = None
        self.input_ids = None

    # ---- orchestration ---------------------------------------------------------------------
    def run(self, levels: list[str]) -> dict:
        start = time.perf_counter()
        if self.spec.kind == KIND_REMOTE_CODE:
            for lv in R.LEVELS:
                R.set_level(self.record, lv, "skip", reason=(
                    f"not testable here: model_type {self.spec.model_type!r} needs remote code "
                    "(trust_remote_code); the installed transformers has no class for it"))
            self.record["testable"] = False
            return self._finish(start)
        for lv in R.LEVELS:
            if lv == "L5":
                continue  # run by the tensor-parallel phase (torchrun)
            if lv not in levels:
                R.set_level(self.record, lv, "skip", reason=R.NOT_REQUESTED)
                continue
            if lv != "L1" and self.record["levels"].get("L1") != "pass":
                R.set_level(self.record, lv, "skip", reason="L1 (build and load) did not pass")
                self.emit({"event": "level_result", "level": lv, "record": self.record})
                continue
            self._run_level(lv)
        if "L5" not in levels:
            R.set_level(self.record, "L5", "skip", reason=R.NOT_REQUESTED)
        elif self.record["levels"].get("L1") != "pass":
            R.set_level(self.record, "L5", "skip", reason="L1 (build and load) did not pass")
        elif not self.record["details"].get("L1", {}).get("tp_plan"):
            R.set_level(self.record, "L5", "skip", reason="architecture has no tensor-parallel plan "
                        "(base_model_tp_plan)")
        return self._finish(start)

    def _finish(self, start: float) -> dict:
        R.order_levels(self.record)
        self.record["timings"]["total"] = round(time.perf_counter() - start, 3)
        self.cpu_model = self.dev_model = None
        gc.collect()
        return self.record

    def _run_level(self, level: str) -> None:
        self.emit({"event": "level_start", "level": level})
        t0 = time.perf_counter()
        try:
            details = getattr(self, f"level_{level.lower()}")() or {}
        except BaseException as exc:  # noqa: BLE001 - every failure is a finding to record
            if isinstance(exc, KeyboardInterrupt):
                raise
            reason, op = describe_exception(exc)
            R.set_level(self.record, level, "fail", reason=reason, op=op, seconds=time.perf_counter() - t0,
                        details=getattr(exc, "details", None))
        else:
            R.set_level(self.record, level, "pass", details=details, seconds=time.perf_counter() - t0)
        finally:
            try:
                _reset_compiler()
            except Exception:  # noqa: BLE001
                pass
        self.emit({"event": "level_result", "level": level, "record": self.record})

    # ---- helpers ---------------------------------------------------------------------------
    def _text_config(self, model):
        config = model.config
        getter = getattr(config, "get_text_config", None)
        return getter() if getter else config

    def _ids(self, batch: int, length: int, seed: int):
        import torch

        vocab = int(self._text_config(self.cpu_model).vocab_size)
        low = 3 if vocab > 16 else 0
        high = min(vocab, 1000)
        gen = torch.Generator().manual_seed(seed)
        return torch.randint(low, high, (batch, length), generator=gen)

    # ---- L1: build and load ----------------------------------------------------------------
    def load_cpu_and_device(self, cls) -> None:
        """Load the tiny checkpoint with ``cls`` on CPU and with ``device_map=<device>``: every parameter and
        buffer must land on the device, and no weight may be re-initialised (the copies would differ)."""
        import torch

        self.stage("load on CPU")
        self.cpu_model = cls.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        self.stage(f"from_pretrained(device_map={self.device!r})")
        try:
            self.dev_model, info = cls.from_pretrained(
                self.model_dir, dtype=torch.float32, device_map=self.device, output_loading_info=True)
        except Exception as exc:
            reason, op = describe_exception(exc, stage=f"from_pretrained(device_map={self.device!r})")
            raise LevelFailure(reason, op) from exc
        self.dev_model.eval()
        want = torch.device(self.device).type
        off_device = [n for n, t in list(self.dev_model.named_parameters()) + list(self.dev_model.named_buffers())
                      if t.device.type != want]
        if off_device:
            raise LevelFailure(f"{len(off_device)} tensors not on {want} after device_map={self.device!r}: "
                               + ", ".join(off_device[:5]), op="from_pretrained(device_map)")
        missing = sorted(info.get("missing_keys") or [])
        if missing:
            raise LevelFailure("tiny checkpoint reloads with missing (randomly re-initialised) weights, so "
                               "device and CPU copies differ: " + ", ".join(missing[:5]),
                               op="save_tiny_model/from_pretrained")

    def level_l1(self) -> dict:
        from hf_neuron import tiny_models

        try:
            self.model_dir = Path(tiny_models.save_tiny_model(
                self.spec.model_type, self.workdir / self.spec.model_type, seed=0))
            cls = tiny_models.model_class_for(self.spec.model_type)
        except Exception as exc:
            reason, op = describe_exception(exc, stage="tiny model")
            raise LevelFailure(reason, op or "hf_neuron.tiny_models") from exc
        self.record["model_class"] = cls.__name__
        self.load_cpu_and_device(cls)
        n_params = sum(p.numel() for p in self.cpu_model.parameters())
        tp_plan = bool(getattr(self.cpu_model, "supports_tp_plan", False))
        details = {"parameters": n_params, "tp_plan": tp_plan, "multimodal_text_only": self.spec.kind == KIND_MULTIMODAL}
        from hf_neuron.transformers.tensor_parallel.experts import routed_expert_count

        experts = routed_expert_count(self.cpu_model.config)
        if experts:
            details["routed_experts"] = experts  # a mixture of experts: L5 checks that TP shards them
        substitute = tiny_models.text_decoder_substitute(self.spec.model_type)
        if substitute:
            details["text_decoder_only"] = substitute[1]
        return details

    # ---- L2: eager forward -----------------------------------------------------------------
    def level_l2(self) -> dict:
        import torch

        ids = self._ids(FORWARD_BATCH, FORWARD_LEN, seed=1)
        mask = torch.ones_like(ids)
        with torch.no_grad():
            ref = self.cpu_model(input_ids=ids, attention_mask=mask).logits.float()
            self.stage("forward on device")
            out = self.dev_model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            out = out.float().cpu()
        if out.shape != ref.shape:
            raise LevelFailure(f"logits shape {tuple(out.shape)} != CPU {tuple(ref.shape)}")
        if not torch.isfinite(out).all():
            raise LevelFailure("non-finite logits on device" + ("" if torch.isfinite(ref).all() else " (and on CPU)"))
        diff = (out - ref).abs().max().item()
        scale = ref.abs().max().item()
        details = {"max_abs_diff": diff, "max_abs_logit": scale}
        if diff > LOGITS_ATOL + LOGITS_RTOL * scale:
            exc = LevelFailure(f"logits differ from CPU: max abs diff {diff:.3g} (max |logit| {scale:.3g})")
            exc.details = details
            raise exc
        return details

    # ---- L3: greedy generate with the Neuron defaults --------------------------------------
    def generation_kwargs(self) -> tuple[dict, str]:
        """What ``generate`` is given beyond the prompt, and how to describe it.

        On Neuron with hf_neuron's generation defaults active: ``max_cache_len`` and
        ``prefill_chunk_size`` only, as a user sizes a cache (the adapter applies static cache and
        the "neuron" compile config). Without them (``HF_NEURON_DISABLE=1``, an older hf_neuron):
        the whole recipe passed explicitly. On CPU (harness self-test): the recipe compiled with the
        "eager" backend.
        """
        from transformers import CompileConfig

        sizes = {"max_cache_len": L3_MAX_CACHE_LEN, "prefill_chunk_size": L3_PREFILL_CHUNK}
        if self.device.split(":")[0] == "cpu":
            compile_config = CompileConfig(backend="eager", fullgraph=False, dynamic=False, mode="default")
            compile_config._compile_all_devices = True
            return ({"cache_implementation": "static", **sizes, "compile_config": compile_config},
                    "explicit recipe, eager backend (CPU self-test)")
        if _neuron_generation_defaults_active():
            return sizes, "generate(max_cache_len, prefill_chunk_size), hf_neuron generation defaults"
        compile_config = CompileConfig(backend="neuron", fullgraph=False, dynamic=False, mode="default")
        return ({"cache_implementation": "static", **sizes, "compile_config": compile_config},
                "explicit recipe (hf_neuron generation defaults inactive)")

    def _prompts(self, lengths: tuple[int, ...]):
        """Left-padded prompts of the given lengths (each length always gets the same tokens)."""
        import torch

        config = self._text_config(self.cpu_model)
        pad = config.pad_token_id if isinstance(getattr(config, "pad_token_id", None), int) else 0
        width = max(lengths)
        ids = torch.full((len(lengths), width), pad, dtype=torch.long)
        mask = torch.zeros((len(lengths), width), dtype=torch.long)
        for row, length in enumerate(lengths):
            ids[row, width - length:] = self._ids(1, length, seed=100 + length)[0]
            mask[row, width - length:] = 1
        return ids, mask, pad

    def level_l3(self) -> dict:
        import torch

        from hf_neuron.transformers.generation.defaults import generation_compiles

        compiles, eager_reason = generation_compiles(self.dev_model)
        # The cache sizes are static-cache settings: generate of a model that keeps a dynamic cache is
        # called plainly, as its users call it.
        kwargs, how = self.generation_kwargs() if compiles else ({}, "plain generate (the model does not compile)")
        common = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False}
        _reset_compiler()
        runs, graphs_per_batch, mismatches = [], {}, []
        for lengths in L3_BATCHES:
            ids, mask, pad = self._prompts(lengths)
            with torch.no_grad():
                ref = self.cpu_model.generate(input_ids=ids, attention_mask=mask, pad_token_id=pad, **common)
            self.stage(f"generate on device: batch {len(lengths)}, prompt lengths {list(lengths)}")
            with torch.no_grad(), count_graphs() as counted:
                out = self.dev_model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                              pad_token_id=pad, **common, **kwargs)
            graphs_per_batch[len(lengths)] = graphs_per_batch.get(len(lengths), 0) + counted.count
            run = {"batch": len(lengths), "prompt_lengths": list(lengths), "graphs": counted.count,
                   "tokens": out[:, -NEW_TOKENS:].cpu().tolist(), "cpu_tokens": ref[:, -NEW_TOKENS:].tolist()}
            runs.append(run)
            if run["tokens"] != run["cpu_tokens"]:
                mismatches.append(run)
        graphs = sum(graphs_per_batch.values())
        self.record["graphs_compiled"]["L3"] = graphs
        path = PATH_COMPILED if graphs else PATH_EAGER
        details = {"path": path, "graphs": graphs, "max_cache_len": L3_MAX_CACHE_LEN,
                   "prefill_chunk_size": L3_PREFILL_CHUNK,
                   "graphs_per_batch": {str(b): n for b, n in graphs_per_batch.items()}, "runs": runs,
                   "generate": how}
        if path == PATH_EAGER:
            details["eager_reason"] = eager_reason or "generate did not call a compiled forward"
        if mismatches:
            run = mismatches[0]
            row = next(i for i, (a, b) in enumerate(zip(run["tokens"], run["cpu_tokens"])) if a != b)
            got, want = run["tokens"][row], run["cpu_tokens"][row]
            first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            exc = LevelFailure(f"greedy tokens differ from CPU eager at new token {first} (batch {run['batch']}, "
                               f"prompt of {run['prompt_lengths'][row]} tokens): {got} vs {want}", op="generate")
            exc.details = details
            raise exc
        over = {b: n for b, n in graphs_per_batch.items() if n > L3_GRAPHS_PER_SHAPE}
        if over:
            batch, count = next(iter(over.items()))
            exc = LevelFailure(
                f"generate compiled {count} graphs at batch {batch}, max_cache_len {L3_MAX_CACHE_LEN} over prompts "
                f"of {list(L3_PROMPT_LENGTHS)} tokens (at most {L3_GRAPHS_PER_SHAPE}: one prefill chunk, one decode "
                f"step; each further graph is a recompile on Trainium)", op="generate")
            exc.details = details
            raise exc
        return details

    # ---- L4: one training step -------------------------------------------------------------
    def stage(self, text: str) -> None:
        """Say what the level is doing, so that a crash that kills the worker names the step."""
        self.emit({"event": "stage", "stage": text})

    def _train_step(self, model, ids, device, call=None):
        """Forward with labels and backward through ``call`` (the model itself, or its compiled form);
        gradients are read from ``model`` so parameter names match across the two."""
        model.zero_grad(set_to_none=True)
        out = (model if call is None else call)(input_ids=ids.to(device), labels=ids.to(device))
        out.loss.backward()
        grads = {n: (p.grad.detach().float().cpu() if p.grad is not None else None)
                 for n, p in model.named_parameters() if p.requires_grad}
        return float(out.loss.detach().float().cpu()), grads

    def _compare_step(self, what, loss, grads, ref_loss, ref_grads) -> dict:
        import math

        if not math.isfinite(loss):
            raise LevelFailure(f"{what}: non-finite loss {loss}")
        if abs(loss - ref_loss) > LOSS_RTOL * max(1.0, abs(ref_loss)):
            raise LevelFailure(f"{what}: loss {loss:.8g} != CPU {ref_loss:.8g}")
        worst, worst_name = 0.0, None
        for name, ref in ref_grads.items():
            got = grads.get(name)
            if (ref is None) != (got is None):
                raise LevelFailure(f"{what}: gradient of {name} is {'missing' if got is None else 'unexpected'}")
            if ref is None:
                continue
            err = (got - ref).abs().max().item()
            bound = GRAD_ATOL + GRAD_RTOL * ref.abs().max().item()
            if err / bound > worst:
                worst, worst_name = err / bound, name
        if worst > 1.0:
            raise LevelFailure(f"{what}: gradient of {worst_name} differs from CPU ({worst:.3g}x tolerance)")
        return {"loss": loss, "worst_grad_error_vs_tolerance": worst}

    def level_l4(self) -> dict:
        import torch

        ids = self._ids(FORWARD_BATCH, FORWARD_LEN, seed=3)
        for model in (self.cpu_model, self.dev_model):
            _zero_stochastic(model)
            model.train()
        try:
            ref_loss, ref_grads = self._train_step(self.cpu_model, ids, "cpu")
            details = {"cpu_loss": ref_loss}
            self.stage("eager training step on device")
            try:
                loss, grads = self._train_step(self.dev_model, ids, self.device)
            except Exception as exc:
                reason, op = describe_exception(exc, stage="eager training step")
                raise LevelFailure(reason, op) from exc
            details["eager"] = self._compare_step("eager training step", loss, grads, ref_loss, ref_grads)
            backend = "eager" if self.device.split(":")[0] == "cpu" else "neuron"
            _reset_compiler()
            compiled = torch.compile(self.dev_model, backend=backend, dynamic=False, fullgraph=False)
            counted = None
            self.stage("compiled training step on device")
            try:
                with count_graphs() as counted:
                    loss, grads = self._train_step(self.dev_model, ids, self.device, call=compiled)
            except Exception as exc:
                reason, op = describe_exception(exc, stage="compiled training step")
                raise LevelFailure(reason, op) from exc
            finally:
                graphs = counted.count if counted is not None else None
                self.record["graphs_compiled"]["L4"] = graphs
            details["graphs"] = graphs
            details["compiled"] = self._compare_step("compiled training step", loss, grads, ref_loss, ref_grads)
            return details
        finally:
            for model in (self.cpu_model, self.dev_model):
                model.zero_grad(set_to_none=True)
                model.eval()

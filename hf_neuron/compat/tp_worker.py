"""L5 worker: tensor parallelism (TP = world size) under torchrun equals a single device.

``torchrun --standalone --nproc_per_node=2 -m hf_neuron.compat.tp_worker --device neuron --workdir DIR
--archs-file FILE --events-file EVENTS``

Every rank loads the tiny checkpoint twice: whole on CPU (the reference: eager, nothing compiled), and
sharded with ``DistributedConfig(tp_size=world_size)`` on its own device. The sharded model's logits must
match the single-device logits within tolerance and its greedy tokens must be identical. A mixture-of-experts
model must also hold only its share of the routed experts' weights (replicated experts fail the level) and take
one training step with CPU's loss and expert gradients. An image-text-to-text architecture is given a prompt
with an image (its checkpoint's processor); its text decoder is what the plan shards. Rank 0 appends JSON
events (``start``, ``result``, or ``fatal``) to EVENTS; one job serves many architectures.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import time
from pathlib import Path

from hf_neuron.compat.archs import KIND_IMAGE_TEXT, KIND_TEST, ArchSpec

TP_LOGITS_ATOL, TP_LOGITS_RTOL = 1e-4, 1e-3
#: A training step of an MoE model (forward with labels and backward): the loss relative to max(1, |loss|),
#: the routed experts' gradients absolute (plus TP_LOGITS_RTOL of the largest gradient).
TRAIN_LOSS_ATOL, TRAIN_GRAD_ATOL = 1e-5, 1e-5
NEW_TOKENS = 8


def _emit(path: Path, event: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(event, default=str) + "\n")
        fh.flush()


def run_tp(spec: ArchSpec, workdir: Path, world: int) -> dict:
    import torch

    from hf_neuron import tiny_models

    model_dir = workdir / spec.model_type
    images = spec.kind == KIND_IMAGE_TEXT
    # Phase 1 saved it, unless this is a --resume in a new run: then rank 0 saves it again (same seed,
    # same weights) while the other ranks wait.
    if not (model_dir / "config.json").exists() and int(os.environ.get("RANK", "0")) == 0:
        if images:
            from hf_neuron.tiny_models.vision import save_tiny_vision_model

            save_tiny_vision_model(spec.model_type, model_dir, seed=0)
        else:
            tiny_models.save_tiny_model(spec.model_type, model_dir, seed=0)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    if images:
        from transformers import AutoModelForImageTextToText

        return compare_with_single_device(model_dir, AutoModelForImageTextToText, world,
                                          inputs=_image_inputs(spec.model_type, model_dir))
    return compare_with_single_device(model_dir, tiny_models.model_class_for(spec.model_type), world)


def _image_inputs(model_type: str, model_dir: Path) -> dict:
    """A prompt with an image, through the checkpoint's own processor."""
    from transformers import AutoProcessor

    from hf_neuron.tiny_models.vision import float32_pixels, random_image, vision_recipe

    processor = AutoProcessor.from_pretrained(model_dir)
    inputs = processor(text=[vision_recipe(model_type).prompt("The quick brown fox")], images=[[random_image(40, 30)]],
                       return_tensors="pt")
    inputs.pop("labels", None)
    return dict(float32_pixels(inputs))


def compare_with_single_device(model_dir: Path, cls, world: int, inputs: dict | None = None) -> dict:
    """Load ``model_dir`` whole on CPU and sharded over ``world`` ranks: logits and greedy tokens must match
    (raises :class:`~hf_neuron.compat.levels.LevelFailure` otherwise). Returns the details.
    ``inputs``: the model's inputs (a prompt with an image), instead of random token ids.

    The reference runs eagerly on CPU, the same computation as one device: each rank compiles only its
    sharded model's graphs (a compiled single-device reference doubled every rank's compile work)."""
    import torch
    from transformers import DistributedConfig

    from hf_neuron.compat.levels import LevelFailure, describe_exception
    from hf_neuron.compat.results import experts_split
    from hf_neuron.transformers.tensor_parallel.experts import has_expert_plan

    single = cls.from_pretrained(model_dir, dtype=torch.float32).eval()
    try:
        sharded = cls.from_pretrained(model_dir, dtype=torch.float32,
                                      distributed_config=DistributedConfig(tp_size=world)).eval()
    except Exception as exc:
        reason, op = describe_exception(exc, stage=f"from_pretrained(DistributedConfig(tp_size={world}))")
        raise LevelFailure(reason, op) from exc
    if inputs is None:
        config = single.config.get_text_config() if hasattr(single.config, "get_text_config") else single.config
        gen = torch.Generator().manual_seed(5)
        ids = torch.randint(3, min(int(config.vocab_size), 1000), (1, 10), generator=gen)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    ids = inputs["input_ids"]
    dev_sharded = next(sharded.parameters()).device

    def on(where):
        return {k: (v.to(where) if hasattr(v, "to") else v) for k, v in inputs.items()}

    with torch.no_grad():
        ref = single(**on("cpu")).logits.float()
        out = sharded(**on(dev_sharded)).logits
        out = (out.full_tensor() if hasattr(out, "full_tensor") else out).float().cpu()
        diff = (out - ref).abs().max().item()
        scale = ref.abs().max().item()
        details = {"max_abs_diff": diff, "tp_size": world, "sharded_fraction": sharded_fraction(sharded)}
        experts = describe_experts(single, sharded)
        if experts is not None:
            # Routed experts: how many each rank holds and what share of their weights (expert parallelism
            # shards them by expert, older plans inside each expert). Replicated experts fail the level:
            # the bulk of an MoE checkpoint on every rank is not tensor parallelism.
            details["experts"] = experts
            if not experts_split(experts, world):
                raise LevelFailure.with_details(
                    details, f"routed experts not sharded under TP={world}: each rank holds "
                    f"{experts['expert_weights_per_rank']:.0%} of the {experts['experts']} experts' weights "
                    f"(ep_size={experts['ep_size']}{'' if has_expert_plan(sharded) else '; this Transformers release has no expert-parallel plan for it'})",
                    op="from_pretrained")
        if diff > TP_LOGITS_ATOL + TP_LOGITS_RTOL * scale:
            raise LevelFailure(f"TP={world} logits differ from single device: max abs diff {diff:.3g} "
                               f"(max |logit| {scale:.3g})")
        common = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False}
        ref_tokens = single.generate(**on("cpu"), **common)
        tokens = sharded.generate(**on(dev_sharded), **common)
    ref_tokens = ref_tokens[0, ids.shape[1]:].cpu().tolist()
    tokens = tokens[0, ids.shape[1]:].cpu().tolist()
    details["tokens"] = tokens
    if tokens != ref_tokens:
        raise LevelFailure(f"TP={world} greedy tokens differ from single device: {tokens} vs {ref_tokens}",
                           op="generate")
    if experts is not None:
        try:
            details["training"] = training_step_matches_cpu(single, sharded, ids, world)
        except Exception as exc:
            if not isinstance(exc, LevelFailure):
                reason, op = describe_exception(exc, stage=f"TP={world} training step")
                exc = LevelFailure(reason, op)
            exc.details = details  # what passed (logits, tokens, the experts' layout) stays on record
            raise exc
    return details


def describe_experts(single, sharded) -> dict | None:
    """The routed experts of ``sharded`` (this rank's share) against the whole model ``single``: ``{"experts":
    total, "local_experts": held by this rank (whole or in part), "expert_weights_per_rank": share of the
    experts' weights, "ep_size", "ep_implementation"}``, or None for a dense model."""
    from hf_neuron.transformers.tensor_parallel.experts import expert_layout, is_expert_parameter, routed_expert_count

    total = routed_expert_count(single.config)
    if not total:
        return None
    whole = {name: p.numel() for name, p in single.named_parameters() if is_expert_parameter(name)}
    held = sum((p.to_local() if hasattr(p, "to_local") else p).numel()
               for name, p in sharded.named_parameters() if name in whole)
    layout = expert_layout(sharded) or {}
    config = getattr(sharded.config, "distributed_config", None)
    return {"experts": total, "local_experts": layout.get("local_experts", total),
            "expert_weights_per_rank": round(held / sum(whole.values()), 4) if whole else 1.0,
            "ep_size": getattr(config, "ep_size", 1), "ep_implementation": getattr(config, "ep_implementation", None)}


def training_step_matches_cpu(single, sharded, ids, world: int) -> dict:
    """One training step (forward with labels, backward) of the sharded model against the whole model on CPU:
    the loss and the routed experts' gradients must match (raises
    :class:`~hf_neuron.compat.levels.LevelFailure` otherwise)."""
    import torch

    from hf_neuron.compat.levels import LevelFailure
    from hf_neuron.transformers.tensor_parallel.experts import is_expert_parameter

    losses, grads = [], []
    for model, device in ((single, "cpu"), (sharded, next(sharded.parameters()).device)):
        model.train()
        model.zero_grad(set_to_none=True)
        batch = ids.to(device)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        losses.append((loss.full_tensor() if hasattr(loss, "full_tensor") else loss).item())
        grads.append({name: p.grad for name, p in model.named_parameters()
                      if is_expert_parameter(name) and p.grad is not None})
        model.eval()
    loss_diff = abs(losses[1] - losses[0])
    if loss_diff > TRAIN_LOSS_ATOL * max(1.0, abs(losses[0])):
        raise LevelFailure(f"TP={world} training loss {losses[1]:.6g} differs from CPU's {losses[0]:.6g}",
                           op="backward")
    grad_diff, compared = 0.0, 0
    for name, reference in grads[0].items():
        grad = grads[1].get(name)
        if grad is None:
            raise LevelFailure(f"TP={world} training step: no gradient for {name}", op="backward")
        grad = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).cpu()
        if grad.shape != reference.shape:
            raise LevelFailure(f"TP={world} training step: the gradient of {name} is {tuple(grad.shape)} on a rank "
                               f"(not gathered), CPU's {tuple(reference.shape)}", op="backward")
        diff = (grad - reference).abs().max().item()
        if diff > TRAIN_GRAD_ATOL + TP_LOGITS_RTOL * reference.abs().max().item():
            raise LevelFailure(f"TP={world} training step: the gradient of {name} differs from CPU's by {diff:.3g}",
                               op="backward")
        grad_diff, compared = max(grad_diff, diff), compared + 1
    if not compared:
        raise LevelFailure(f"TP={world} training step: no routed expert received a gradient", op="backward")
    return {"loss": losses[1], "cpu_loss": losses[0], "loss_diff": loss_diff, "max_grad_diff": grad_diff,
            "expert_gradients_compared": compared}


def sharded_fraction(model) -> float:
    """The fraction of the decoder layers' parameters that tensor parallelism splits over the ranks."""
    import re

    from torch.distributed.tensor import DTensor, Replicate

    total = split = 0
    for name, param in model.named_parameters():
        if re.search(r"\.\d+\.", name):
            total += param.numel()
            if isinstance(param, DTensor) and any(p != Replicate() for p in param.placements):
                split += param.numel()
    return round(split / total, 3) if total else 0.0


def run_fake(spec: ArchSpec) -> dict:
    from hf_neuron.compat.testing_archs import behaviour, log_run

    log_run(spec.model_type, "L5")
    if behaviour(spec.model_type) == "tphang":
        while True:
            time.sleep(1)
    return {"tp_size": int(os.environ.get("WORLD_SIZE", "1"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_neuron.compat.tp_worker")
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--archs-file", required=True)
    parser.add_argument("--events-file", required=True)
    args = parser.parse_args(argv)

    faulthandler.enable(all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    from hf_neuron.compat.worker import watch_parent

    watch_parent()  # a killed torchrun must not leave its ranks behind
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    events = Path(args.events_file)
    emit = (lambda ev: _emit(events, ev)) if rank == 0 else (lambda ev: None)
    specs = [ArchSpec.from_json(d) for d in json.loads(Path(args.archs_file).read_text())]
    real = any(s.kind != KIND_TEST for s in specs)

    dist = None
    if real:
        import torch
        import torch.distributed as dist

        threads = os.environ.get("HF_NEURON_COMPAT_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        backend = "gloo" if args.device.split(":")[0] == "cpu" else "neuron"
        try:
            dist.init_process_group(backend=backend)
        except Exception as exc:  # noqa: BLE001
            emit({"event": "fatal", "reason": f"init_process_group(backend={backend!r}) failed: "
                                              f"{type(exc).__name__}: {exc}"})
            return 2
    from hf_neuron.compat.levels import describe_exception

    for spec in specs:
        emit({"event": "start", "model_type": spec.model_type})
        t0 = time.perf_counter()
        status, reason, op, details = "pass", None, None, None
        try:
            details = run_fake(spec) if spec.kind == KIND_TEST else run_tp(spec, Path(args.workdir), world)
        except Exception as exc:  # noqa: BLE001 - recorded
            status = "fail"
            reason, op = describe_exception(exc)
            details = getattr(exc, "details", None)
        if dist is not None:
            # Both ranks must agree: a failure on either one fails the level.
            outcomes = [None] * world
            dist.all_gather_object(outcomes, (status, reason, op))
            for other in outcomes:
                if other[0] == "fail" and status == "pass":
                    status, reason, op = other
        emit({"event": "result", "model_type": spec.model_type, "status": status, "reason": reason, "op": op,
              "details": details, "seconds": round(time.perf_counter() - t0, 3)})
    if dist is not None and dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

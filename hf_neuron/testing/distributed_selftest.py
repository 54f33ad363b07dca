"""Self-test of the ``"neuron"`` process-group backend, run under torchrun.

``HF_NEURON_SIMULATOR=1 torchrun --standalone --nproc_per_node=N -m hf_neuron.testing.distributed_selftest
--out DIR [--model-dir DIR]``

Every rank runs every check (collectives, TorchNeuron's limits, functional collectives, DDP and
FSDP2 against single-process training, a DTensor matmul, a tensor-parallel tiny Llama against the
single-process model) and writes ``DIR/rank{R}.json``: ``{"rank", "world", "checks": {name: {"ok",
"detail"}}}``. It never calls ``destroy_process_group``: exiting cleanly without it is checked too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))

# A rank waits this long in a collective whose peers went elsewhere (after a failure) before it fails.
COLLECTIVE_TIMEOUT = timedelta(seconds=120)

_checks: dict[str, dict] = {}
# The ranks agree on each check's outcome through the rendezvous store (not the backend under test),
# and all stop after the first check that failed somewhere: one failure must not become a hang.
_sync: dict = {"store": None, "stopped_at": None}


class CheckFailed(AssertionError):
    pass


def expect(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


def _all_ranks_passed(name: str, ok: bool) -> bool:
    store = _sync["store"]
    if store is None:
        return ok
    keys = [f"hf_neuron_selftest/{name}/{r}" for r in range(WORLD)]
    store.set(keys[RANK], "1" if ok else "0")
    try:
        store.wait(keys, COLLECTIVE_TIMEOUT + timedelta(seconds=180))
    except Exception:  # noqa: BLE001  (a rank never finished the check)
        return False
    return all(store.get(k) == b"1" for k in keys)


def check(name: str):
    """Run the decorated function now and record whether it passed (and what it returned or raised)."""

    def run(fn):
        if _sync["stopped_at"] is not None:
            _checks[name] = {"ok": False, "detail": f"not run: check {_sync['stopped_at']!r} failed on a rank"}
            return fn
        t0 = time.perf_counter()
        try:
            detail = fn()
            _checks[name] = {"ok": True, "detail": detail}
        except Exception as exc:  # noqa: BLE001  (recorded, asserted by the pytest side)
            _checks[name] = {
                "ok": False,
                "detail": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=8),
            }
        _checks[name]["seconds"] = round(time.perf_counter() - t0, 2)
        if not _all_ranks_passed(name, _checks[name]["ok"]):
            _sync["stopped_at"] = name
        return fn

    return run


def expect_raises(exc_type, fn, *must_contain: str) -> str:
    try:
        fn()
    except exc_type as exc:
        text = str(exc)
        for part in must_contain:
            expect(part in text, f"error message lacks {part!r}: {text}")
        return text.splitlines()[0][:300]
    raise CheckFailed(f"expected {exc_type.__name__}, nothing was raised")


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().cpu().float() - b.detach().cpu().float()).abs().max().item()


def mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The global batches of a small regression task (identical on every rank; CPU)."""
    gen = torch.Generator().manual_seed(1234)
    return [(torch.randn(4 * WORLD, 8, generator=gen), torch.randn(4 * WORLD, 4, generator=gen)) for _ in range(steps)]


def train(model: torch.nn.Module, data, dev, shard: bool) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data:
        if shard:  # each rank takes its slice of the global batch
            x, y = x.chunk(WORLD)[RANK], y.chunk(WORLD)[RANK]
        loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _stream_shim() -> list[str]:
    """FSDP2 creates streams and events through ``torch.neuron``; add them where the device module lacks them."""
    added = []
    if not hasattr(torch.neuron, "Stream"):
        torch.neuron.Stream = lambda device=None, priority=0, **_: torch.Stream(
            device=torch.device("neuron", torch.neuron.current_device() if device is None else torch.device(device).index),
            priority=priority,
        )
        added.append("Stream")
    if not hasattr(torch.neuron, "Event"):
        torch.neuron.Event = lambda enable_timing=False, blocking=False, interprocess=False: torch.Event(
            torch.device("neuron", torch.neuron.current_device()), enable_timing=enable_timing, blocking=blocking,
            interprocess=interprocess,
        )
        added.append("Event")
    return added


def run(out_dir: Path, model_dir: Path | None) -> None:
    from hf_neuron.simulator import distributed as neuron_dist

    neuron_dist.register()  # idempotent; device.install() does it too
    dist.init_process_group(backend="neuron", timeout=COLLECTIVE_TIMEOUT)
    _sync["store"] = dist.distributed_c10d._get_default_store()
    dev = torch.device("neuron", torch.neuron.current_device())
    world_pg = dist.group.WORLD

    @check("init")
    def _():
        expect(dist.get_backend() == "neuron", f"backend is {dist.get_backend()}")
        backend = world_pg._get_backend(torch.device("neuron"))
        expect(not backend.supports_splitting, "the backend claims communicator splitting")
        return {"device": str(dev), "backend_class": type(backend).__name__, "group_name": world_pg.group_name}

    @check("all_reduce")
    def _():
        results = {}
        for name, op, want in [
            ("sum", dist.ReduceOp.SUM, sum(range(1, WORLD + 1))),
            ("avg", dist.ReduceOp.AVG, sum(range(1, WORLD + 1)) / WORLD),
            ("max", dist.ReduceOp.MAX, WORLD),
            ("premul_sum(0.5)", dist._make_nccl_premul_sum(0.5), sum(range(1, WORLD + 1)) * 0.5),
        ]:
            t = torch.full((3, 5), float(RANK + 1), device=dev)
            dist.all_reduce(t, op=op)
            expect(t.device == dev, f"result moved to {t.device}")
            expect(torch.equal(t.cpu(), torch.full((3, 5), float(want))), f"{name}: got {t.cpu()[0, 0]}, want {want}")
            results[name] = t[0, 0].item()
        work = dist.all_reduce(torch.ones(4, device=dev), async_op=True)
        work.wait()
        expect(work.result()[0].device == dev, "Work.result() is not the neuron tensor")
        fut_value = work.get_future().wait()[0]
        expect(fut_value.device == dev and fut_value.sum().item() == 4 * WORLD, "Work.get_future() value")
        return results

    @check("all_gather")
    def _():
        t = torch.arange(3, device=dev, dtype=torch.float32) + 10 * RANK
        parts = [torch.empty(3, device=dev) for _ in range(WORLD)]
        dist.all_gather(parts, t)
        want = [torch.arange(3, dtype=torch.float32) + 10 * r for r in range(WORLD)]
        expect(all(torch.equal(p.cpu(), w) for p, w in zip(parts, want)), "all_gather values")
        out = torch.empty(WORLD * 3, device=dev)
        dist.all_gather_into_tensor(out, t)
        expect(torch.equal(out.cpu(), torch.cat(want)), "all_gather_into_tensor values")
        objs = [None] * WORLD
        dist.all_gather_object(objs, {"rank": RANK})
        expect(objs == [{"rank": r} for r in range(WORLD)], f"all_gather_object: {objs}")
        return out.cpu().tolist()

    @check("reduce_scatter_tensor")
    def _():
        inp = torch.arange(WORLD * 2, device=dev, dtype=torch.float32) * (RANK + 1)
        out = torch.empty(2, device=dev)
        dist.reduce_scatter_tensor(out, inp)
        scale = sum(range(1, WORLD + 1))
        want = torch.arange(WORLD * 2, dtype=torch.float32).chunk(WORLD)[RANK] * scale
        expect(torch.equal(out.cpu(), want), f"SUM: {out.cpu()} vs {want}")
        dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
        expect(torch.allclose(out.cpu(), want / WORLD), f"AVG: {out.cpu()} vs {want / WORLD}")
        return out.cpu().tolist()

    @check("broadcast")
    def _():
        t = torch.full((4,), float(RANK), device=dev) if RANK else torch.arange(4.0, device=dev)
        dist.broadcast(t, src=0)
        expect(torch.equal(t.cpu(), torch.arange(4.0)), f"broadcast: {t.cpu()}")
        obj = [{"from": RANK}]
        dist.broadcast_object_list(obj, src=0)
        expect(obj == [{"from": 0}], f"broadcast_object_list: {obj}")
        return t.cpu().tolist()

    @check("reduce_gather_scatter")
    def _():
        t = torch.full((2,), float(RANK + 1), device=dev)
        dist.reduce(t, dst=0)
        if RANK == 0:
            expect(t.cpu().tolist() == [float(sum(range(1, WORLD + 1)))] * 2, f"reduce: {t.cpu()}")
        gathered = [torch.empty(2, device=dev) for _ in range(WORLD)] if RANK == 0 else None
        dist.gather(torch.full((2,), float(RANK), device=dev), gathered, dst=0)
        if RANK == 0:
            expect([g[0].item() for g in gathered] == [float(r) for r in range(WORLD)], "gather")
        out = torch.empty(2, device=dev)
        chunks = [torch.full((2,), float(r) * 3, device=dev) for r in range(WORLD)] if RANK == 0 else None
        dist.scatter(out, chunks, src=0)
        expect(out.cpu().tolist() == [RANK * 3.0] * 2, f"scatter: {out.cpu()}")

    @check("barrier")
    def _():
        dist.barrier()
        dist.barrier(device_ids=[dev.index])
        work = dist.barrier(async_op=True)
        work.wait()

    @check("all_to_all_single_even")
    def _():
        inp = torch.arange(WORLD * 2, device=dev, dtype=torch.float32) + 100 * RANK
        out = torch.empty(WORLD * 2, device=dev)
        dist.all_to_all_single(out, inp)
        want = torch.cat([torch.arange(2 * RANK, 2 * RANK + 2, dtype=torch.float32) + 100 * r for r in range(WORLD)])
        expect(torch.equal(out.cpu(), want), f"all_to_all_single: {out.cpu()} vs {want}")
        out2 = torch.empty(WORLD * 2, device=dev)
        dist.all_to_all_single(out2, inp, [2] * WORLD, [2] * WORLD)
        expect(torch.equal(out2.cpu(), want), "all_to_all_single with equal split sizes")
        outs = [torch.empty(2, device=dev) for _ in range(WORLD)]
        dist.all_to_all(outs, list(inp.chunk(WORLD)))
        expect(torch.equal(torch.cat(outs).cpu(), want), "all_to_all")
        return out.cpu().tolist()

    @check("all_to_all_uneven_rejected")
    def _():
        if WORLD < 2:
            return "needs 2 ranks"
        inp = torch.zeros(WORLD + 1, device=dev)
        out = torch.zeros(WORLD + 1, device=dev)
        splits = [2] + [1] * (WORLD - 1)
        return expect_raises(
            NotImplementedError, lambda: dist.all_to_all_single(out, inp, splits, splits), "even splits"
        )

    @check("send_recv")
    def _():
        if WORLD < 2:
            return "needs 2 ranks"
        send = torch.full((3,), float(RANK), device=dev)
        recv = torch.empty(3, device=dev)
        reqs = [dist.isend(send, (RANK + 1) % WORLD), dist.irecv(recv, (RANK - 1) % WORLD)]
        for r in reqs:
            r.wait()
        expect(recv.cpu().tolist() == [float((RANK - 1) % WORLD)] * 3, f"ring: {recv.cpu()}")
        ops = [dist.P2POp(dist.isend, send, (RANK + 1) % WORLD), dist.P2POp(dist.irecv, recv, (RANK - 1) % WORLD)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        if RANK == 0:
            dist.send(torch.arange(3.0, device=dev), dst=1)
        elif RANK == 1:
            got = torch.empty(3, device=dev)
            dist.recv(got, src=0)
            expect(got.cpu().tolist() == [0.0, 1.0, 2.0], f"send/recv: {got.cpu()}")
        dist.barrier()

    @check("functional_collectives")
    def _():
        import torch.distributed._functional_collectives as funcol

        x = torch.full((4,), float(RANK + 1), device=dev)
        total = float(sum(range(1, WORLD + 1)))
        y = funcol.all_reduce(x, "sum", world_pg)
        expect(y.device == dev and y.cpu().tolist() == [total] * 4, f"all_reduce(group): {y}")
        name = world_pg.group_name
        y = funcol.all_reduce(x, "avg", name)
        expect(torch.allclose(y.cpu(), torch.full((4,), total / WORLD)), f"all_reduce(group_name, avg): {y}")
        raw = torch.ops._c10d_functional.all_reduce(x, "sum", name)
        raw = torch.ops._c10d_functional.wait_tensor(raw)
        expect(raw.cpu().tolist() == [total] * 4, "_c10d_functional.all_reduce by group name")
        g = funcol.all_gather_tensor(x, 0, name)
        expect(g.shape == (4 * WORLD,) and g.cpu()[::4].tolist() == [float(r + 1) for r in range(WORLD)], "all_gather")
        rs = funcol.reduce_scatter_tensor(torch.ones(2 * WORLD, device=dev), "sum", 0, name)
        expect(rs.cpu().tolist() == [float(WORLD)] * 2, f"reduce_scatter_tensor: {rs}")
        a2a = funcol.all_to_all_single(torch.arange(WORLD, device=dev, dtype=torch.float32), None, None, name)
        expect(a2a.cpu().tolist() == [float(RANK)] * WORLD, f"all_to_all_single: {a2a}")
        return name

    @check("cpu_tensor_rejected")
    def _():
        return expect_raises(RuntimeError, lambda: dist.all_reduce(torch.ones(2)), "cpu")

    @check("one_device_per_process")
    def _():
        if torch.neuron.device_count() < 2:
            return "needs 2 devices"
        other = torch.device("neuron", (dev.index + 1) % torch.neuron.device_count())
        return expect_raises(
            RuntimeError, lambda: dist.all_reduce(torch.ones(2, device=other)), "one Neuron device per process"
        )

    @check("subgroups_and_barrier_limit")
    def _():
        half = list(range(max(1, WORLD // 2)))
        group = dist.new_group(half)
        detail = {}
        if RANK in half:
            t = torch.ones(2, device=dev)
            dist.all_reduce(t, group=group)
            expect(t.cpu().tolist() == [float(len(half))] * 2, f"subgroup all_reduce: {t.cpu()}")
            if len(half) < WORLD:
                detail["barrier"] = expect_raises(
                    NotImplementedError, lambda: dist.barrier(group=group), "default process group"
                )
        full = dist.new_group(list(range(WORLD)))
        dist.barrier(group=full)  # a group spanning the world may barrier, as on Trainium
        return detail

    @check("device_mesh_2d_without_split")
    def _():
        from torch.distributed.device_mesh import init_device_mesh

        if WORLD % 2:
            return "needs an even world"
        mesh = init_device_mesh("neuron", (WORLD // 2, 2), mesh_dim_names=("dp", "tp"))
        t = torch.ones(1, device=dev)
        dist.all_reduce(t, group=mesh.get_group("tp"))
        expect(t.item() == 2.0, f"tp all_reduce: {t.item()}")
        dist.all_reduce(t, group=mesh.get_group("dp"))
        expect(t.item() == 2.0 * (WORLD // 2), f"dp all_reduce: {t.item()}")
        return [mesh.get_group(d).group_name for d in ("dp", "tp")]

    @check("dtensor_matmul")
    def _():
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        mesh = DeviceMesh("neuron", list(range(WORLD)))
        gen = torch.Generator().manual_seed(7)
        a = torch.randn(4 * WORLD, 8 * WORLD, generator=gen)
        b = torch.randn(8 * WORLD, 6, generator=gen)
        want = a @ b
        da = distribute_tensor(a.to(dev), mesh, [Shard(0)])
        db = distribute_tensor(b.to(dev), mesh, [Replicate()])
        rows = (da @ db).full_tensor()
        da1 = distribute_tensor(a.to(dev), mesh, [Shard(1)])
        db0 = distribute_tensor(b.to(dev), mesh, [Shard(0)])
        partial = da1 @ db0  # Partial sum: full_tensor() all-reduces
        full = partial.full_tensor()
        expect(rows.device == dev and full.device == dev, f"results on {rows.device}, {full.device}")
        expect(torch.equal(rows.cpu(), want), f"Shard(0) @ Replicate: max diff {max_diff(rows, want)}")
        expect(torch.allclose(full.cpu(), want, atol=1e-5, rtol=1e-5), f"Shard(1) @ Shard(0): {max_diff(full, want)}")
        resharded = partial.redistribute(mesh, [Shard(1)]).full_tensor()
        expect(torch.allclose(resharded.cpu(), want, atol=1e-5, rtol=1e-5), "Partial -> Shard(1) (reduce_scatter)")
        return {"partial_max_diff": max_diff(full, want)}

    @check("ddp_equals_single_process")
    def _():
        from torch.nn.parallel import DistributedDataParallel as DDP

        data = batches(3)
        ref = mlp(0).to(dev)
        train(ref, data, dev, shard=False)
        model = DDP(mlp(0).to(dev))
        train(model, data, dev, shard=True)
        diffs = [max_diff(p, q) for p, q in zip(model.module.parameters(), ref.parameters())]
        expect(all(p.device == dev and p.grad.device == dev for p in model.module.parameters()), "params left neuron")
        expect(max(diffs) < 1e-6, f"DDP differs from single-process training: max diff {max(diffs):.3g}")
        return {"max_param_diff": max(diffs)}

    @check("fsdp2_equals_single_process")
    def _():
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        shimmed = _stream_shim()
        data = batches(2)
        ref = mlp(1).to(dev)
        train(ref, data, dev, shard=False)
        mesh = init_device_mesh("neuron", (WORLD,))
        model = mlp(1).to(dev)
        fully_shard(model[0], mesh=mesh)
        fully_shard(model, mesh=mesh)
        train(model, data, dev, shard=True)
        diffs = [max_diff(p.full_tensor(), q) for p, q in zip(model.parameters(), ref.parameters())]
        expect(max(diffs) < 1e-6, f"FSDP2 differs from single-process training: max diff {max(diffs):.3g}")
        return {"max_param_diff": max(diffs), "shimmed": shimmed}

    tp_models = {}

    @check("tp_llama_forward")
    def _():
        if model_dir is None:
            return "no --model-dir"
        from transformers import AutoModelForCausalLM, DistributedConfig

        single = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(dev).eval()
        sharded = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, distributed_config=DistributedConfig(tp_size=WORLD)
        ).eval()
        sharded_dev = next(sharded.parameters()).device
        expect(sharded_dev == dev, f"sharded model on {sharded_dev}, expected {dev}")
        n_dtensors = sum(type(p).__name__ == "DTensor" for p in sharded.parameters())
        expect(n_dtensors > 0, "no parameter is sharded")
        gen = torch.Generator().manual_seed(3)
        ids = torch.randint(3, 200, (2, 9), generator=gen).to(dev)
        tp_models.update(single=single, sharded=sharded, ids=ids)
        with torch.no_grad():
            want = single(input_ids=ids).logits
            got = sharded(input_ids=ids).logits
            got = got.full_tensor() if hasattr(got, "full_tensor") else got
            diff = max_diff(got, want)
            expect(diff < 1e-5, f"TP logits differ from single-process: max diff {diff:.3g}")
            # Eager generate: the collectives inside the decoding loop are what is checked here.
            kwargs = {"max_new_tokens": 5, "min_new_tokens": 5, "do_sample": False, "disable_compile": True}
            want_tokens = single.generate(ids, attention_mask=torch.ones_like(ids), **kwargs).cpu().tolist()
            tokens = sharded.generate(ids, attention_mask=torch.ones_like(ids), **kwargs).cpu().tolist()
        expect(tokens == want_tokens, f"TP greedy tokens differ: {tokens} vs {want_tokens}")
        return {"max_abs_diff": diff, "sharded_params": n_dtensors}

    @check("tp_llama_backward")
    def _():
        if not tp_models:
            return "no tensor-parallel model"
        single, sharded, ids = tp_models["single"], tp_models["sharded"], tp_models["ids"]
        for model in (single, sharded):
            model.train()
            loss = model(input_ids=ids, labels=ids).loss
            loss = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
            loss.backward()
        want = dict(single.named_parameters())
        diffs = {}
        for name, p in sharded.named_parameters():
            expect(p.grad is not None, f"{name} has no gradient")
            grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            diffs[name] = max_diff(grad, want[name].grad)
        worst = max(diffs, key=diffs.get)
        expect(diffs[worst] < 1e-5, f"TP gradient of {worst} differs from single-process: {diffs[worst]:.3g}")
        return {"max_grad_diff": diffs[worst], "params": len(diffs)}

    result = {"rank": RANK, "world": WORLD, "checks": _checks}
    (out_dir / f"rank{RANK}.json").write_text(json.dumps(result, indent=1, default=str))
    # No destroy_process_group(): the process must still exit cleanly.


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_neuron.testing.distributed_selftest")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--model-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from hf_neuron.simulator import install

    install()
    run(args.out, args.model_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

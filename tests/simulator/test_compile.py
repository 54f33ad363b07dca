"""The "neuron" Dynamo backend: static shapes only, TorchNeuron's compile failures, eager semantics,
and the graph log that tests use to count compiles."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._dynamo

from hf_neuron.simulator import compiler, graph_log

STATIC_ERROR = "Dynamic shapes detected in the model, but torch-neuronx requires static shapes"


@functools.cache
def _neuron_device_available() -> bool:
    try:
        import hf_neuron.simulator as simulator

        if not simulator.install():
            return False
        torch.ones(1, device="neuron")
        return True
    except Exception:
        return False


@pytest.fixture(params=["cpu", "neuron"])
def device(request):
    if request.param == "neuron" and not _neuron_device_available():
        pytest.skip("the simulated neuron device is not available")
    return torch.device(request.param)


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch):
    monkeypatch.delenv(graph_log.LOG_ENV, raising=False)
    monkeypatch.delenv(compiler.FALLBACK_ENV, raising=False)
    monkeypatch.delenv(compiler.COMPLEX_DECOMPOSE_ENV, raising=False)
    torch._dynamo.reset()
    graph_log.reset()
    yield
    torch._dynamo.reset()
    graph_log.reset()


def _mlp(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(device)


def test_static_graph_matches_eager_forward_and_backward(device):
    model = _mlp(device)
    x = torch.randn(3, 8, device=device)
    eager_out = model(x)
    eager_out.sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    out = compiled(x)
    out.sum().backward()

    assert out.device == x.device
    torch.testing.assert_close(out, eager_out, rtol=0, atol=0)
    for p, g in zip(model.parameters(), eager_grads):
        torch.testing.assert_close(p.grad, g, rtol=0, atol=0)

    (record,) = graph_log.records()
    assert record["status"] == "compiled"
    assert record["device"] == device.type
    assert [3, 8] in [shape for shape, _ in record["inputs"]]
    assert "aten.addmm.default" in record["ops"] and record["backward"] is True
    assert record["node_count"] > 0 and record["forward_nodes"] > 0
    (backward,) = graph_log.records("backward")
    assert backward["graph_index"] == record["index"] and backward["node_count"] > 0


def test_graph_computes_on_values_not_on_memory_layouts(device):
    # softplus_backward's CPU kernel lays its output out like the incoming gradient (here a
    # transposed one) while its meta kernel returns a contiguous tensor, so the backward graph
    # AOTAutograd traces views a tensor the eager kernel did not make viewable. On Trainium the
    # graph is lowered to StableHLO, which has no memory layouts, and the step runs.
    linear = torch.nn.Linear(8, 4, bias=False).to(device)
    weights = torch.randn(2, 4, 12, device=device)

    def step(hidden):
        gate = torch.nn.functional.softplus(linear(hidden) + 0.5).transpose(1, 2).contiguous()
        return (gate.cumsum(-1) * weights).sum()

    hidden = torch.randn(2, 12, 8, device=device)
    step(hidden).backward()
    eager_grad = linear.weight.grad.clone()
    linear.weight.grad = None

    torch.compile(step, backend="neuron", fullgraph=True)(hidden).backward()

    torch.testing.assert_close(linear.weight.grad, eager_grad)


def test_vae_decoder_graph_runs_without_layouts():
    """A VAE decoder's graph: its group norms get an input the trace called contiguous (an attention
    block's output added to its residual follows the transposed operand), and the decomposed
    nearest upsampling clones to ``channels_last``, which Neuron tensors do not have. Both are
    layouts, not values: the compiled decode, forward and backward, equals the CPU one."""
    from hf_neuron.testing.tiny_pipelines.common import _image_vae

    torch.manual_seed(0)
    vae = _image_vae(2)
    latents = torch.randn(1, 4, 4, 4)
    expected = vae.decode(latents).sample
    expected.sum().backward()
    expected_grad = vae.decoder.conv_in.weight.grad.clone()
    vae.zero_grad(set_to_none=True)

    vae.to("neuron")
    decode = torch.compile(vae.decode, backend="neuron", fullgraph=True, dynamic=False)
    with graph_log.count_graphs() as graphs:
        image = decode(latents.to("neuron")).sample
    image.sum().backward()

    assert graphs.count == 1
    torch.testing.assert_close(image.cpu(), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(vae.decoder.conv_in.weight.grad.cpu(), expected_grad, atol=1e-5, rtol=1e-5)


def test_inference_graph_records_no_backward(device):
    model = _mlp(device)
    with torch.no_grad():
        torch.compile(model, backend="neuron")(torch.randn(2, 8, device=device))
    (record,) = graph_log.records()
    assert record["backward"] is False
    assert graph_log.records("backward") == []


def test_dynamic_true_is_rejected(device):
    fn = torch.compile(lambda x: x.sin() + 1, backend="neuron", dynamic=True)
    with pytest.raises(Exception, match=STATIC_ERROR):
        fn(torch.randn(4, 3, device=device))
    assert graph_log.records()[-1]["status"] == "rejected"


def test_dynamic_true_is_rejected_even_when_every_size_specialises():
    # Sizes 0 and 1 are always specialised, so no symbol reaches the graph: dynamic=True itself is refused.
    fn = torch.compile(lambda x: x * 2, backend="neuron", dynamic=True)
    with pytest.raises(Exception, match=STATIC_ERROR):
        fn(torch.randn(1))


def test_automatic_dynamic_recompile_after_second_shape_raises(device):
    fn = torch.compile(lambda x: x.cos() * 3, backend="neuron")
    fn(torch.randn(4, 3, device=device))
    with pytest.raises(Exception, match=STATIC_ERROR):
        fn(torch.randn(5, 3, device=device))


def test_each_new_shape_is_a_new_static_graph_without_automatic_dynamic(device, static_shapes):
    fn = torch.compile(lambda x: x.cos() * 3, backend="neuron")
    with graph_log.count_graphs() as graphs:
        a = fn(torch.randn(4, 3, device=device))
        b = fn(torch.randn(5, 3, device=device))
        fn(torch.randn(4, 3, device=device))  # cached: no new graph
    assert a.shape == (4, 3) and b.shape == (5, 3)
    assert graphs.count == 2
    assert [r["inputs"][0][0] for r in graphs.records] == [[4, 3], [5, 3]]
    assert all(r["status"] == "compiled" for r in graphs.records)


def test_dtype_change_is_a_new_graph(static_shapes):
    fn = torch.compile(lambda x: x + 1, backend="neuron")
    fn(torch.randn(2))
    fn(torch.randn(2, dtype=torch.bfloat16))
    assert [r["inputs"][0][1] for r in graph_log.records()] == ["float32", "bfloat16"]


def test_graph_break_gives_two_graphs():
    def fn(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    with graph_log.count_graphs() as graphs:
        torch.compile(fn, backend="neuron")(torch.randn(3))
    assert graphs.count == 2


@pytest.mark.parametrize("mode", ["max-autotune", "reduce-overhead"])
def test_non_default_mode_warns_and_runs_as_default(mode):
    x = torch.randn(5)
    with pytest.warns(UserWarning, match=f"only mode='default'; mode='{mode}' runs as 'default'"):
        out = torch.compile(lambda t: t.exp() - 1, backend="neuron", mode=mode)(x)
    torch.testing.assert_close(out, x.exp() - 1, rtol=0, atol=0)
    assert graph_log.records()[0]["mode"] == mode


def test_compile_options_warn_and_run():
    x = torch.randn(5)
    with pytest.warns(UserWarning, match=r"ignores torch.compile options \['max_autotune'\]"):
        out = torch.compile(lambda t: t * 4, backend="neuron", options={"max_autotune": True})(x)
    torch.testing.assert_close(out, x * 4, rtol=0, atol=0)


def _mask_fill(x, mask):
    x = x.clone()
    x[mask] = 0.0
    return x


def test_boolean_mask_index_put_raises(device):
    x = torch.randn(4, 3, device=device)
    mask = x > 0
    with pytest.raises(Exception, match=r"boolean-mask aten\.index_put needs aten\.nonzero.*torch\.where"):
        torch.compile(_mask_fill, backend="neuron")(x, mask)
    assert graph_log.records()[-1]["status"] == "rejected"


def test_boolean_mask_read_in_full_graph_raises():
    x = torch.randn(4, 3)
    with pytest.raises(Exception, match=r"boolean-mask aten\.index needs aten\.nonzero"):
        torch.compile(lambda t, m: t[m].sum(), backend="neuron", fullgraph=True)(x, x > 0)


def test_nonzero_raises_but_nonzero_static_compiles():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0])
    with pytest.raises(Exception, match=r"aten\.nonzero has an output shape that depends on tensor values"):
        torch.compile(lambda t: torch.nonzero(t) * 2, backend="neuron", fullgraph=True)(x)
    torch._dynamo.reset()
    fn = torch.compile(lambda t: torch.nonzero_static(t, size=3, fill_value=-1) * 2, backend="neuron", fullgraph=True)
    assert fn(x).tolist() == [[2], [6], [-2]]


def test_where_instead_of_mask_compiles():
    x = torch.randn(4, 3)
    out = torch.compile(lambda t, m: torch.where(m, 0.0, t), backend="neuron")(x, x > 0)
    torch.testing.assert_close(out, _mask_fill(x, x > 0), rtol=0, atol=0)


def test_fallback_env_turns_compile_failure_into_warning_and_eager(device, monkeypatch):
    monkeypatch.setenv(compiler.FALLBACK_ENV, "0")
    x = torch.randn(4, 3, device=device)
    with pytest.warns(UserWarning, match=f"boolean-mask.*Running this graph eagerly because {compiler.FALLBACK_ENV}=0"):
        out = torch.compile(_mask_fill, backend="neuron")(x, x > 0)
    torch.testing.assert_close(out, _mask_fill(x, x > 0), rtol=0, atol=0)
    assert graph_log.records()[-1]["status"] == "fallback"


def test_fallback_env_does_not_cover_dynamic_shapes(monkeypatch):
    monkeypatch.setenv(compiler.FALLBACK_ENV, "0")
    with pytest.raises(Exception, match=STATIC_ERROR):
        torch.compile(lambda x: x + 1, backend="neuron", dynamic=True)(torch.randn(3, 2))


def test_complex_graph_rejected_only_when_complex_decomposition_is_off(monkeypatch):
    def rotate(x):
        return torch.view_as_real(torch.view_as_complex(x) * torch.view_as_complex(x)).sum()

    x = torch.randn(4, 2)
    assert torch.compile(rotate, backend="neuron")(x) == rotate(x)
    torch._dynamo.reset()
    monkeypatch.setenv(compiler.COMPLEX_DECOMPOSE_ENV, "0")
    with pytest.raises(Exception, match="NCC_EVRF004: complex dtype complex64"):
        torch.compile(rotate, backend="neuron")(x)


def test_fp8_graph_rejected():
    with pytest.raises(Exception, match="FP8 dtype float8_e4m3fn"):
        torch.compile(lambda t: t.to(torch.float8_e4m3fn).float(), backend="neuron")(torch.randn(4))


def test_log_file_gets_one_json_line_per_graph(tmp_path, monkeypatch, static_shapes):
    log = tmp_path / "graphs.jsonl"
    monkeypatch.setenv(graph_log.LOG_ENV, str(log))
    model = _mlp("cpu")
    compiled = torch.compile(model, backend="neuron")
    compiled(torch.randn(2, 8)).sum().backward()
    compiled(torch.randn(3, 8)).sum().backward()

    lines = log.read_text().splitlines()
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds == ["graph", "backward", "graph", "backward"]
    graphs = graph_log.read_log(log)
    assert graphs == graph_log.read_log()  # default path: $HF_NEURON_GRAPH_LOG
    assert [g["index"] for g in graphs] == [r["index"] for r in graph_log.records()]
    assert {g["pid"] for g in graphs} == {os.getpid()} and {g["rank"] for g in graphs} == {0}
    assert [[2, 8], "float32"] in graphs[0]["inputs"] and [[3, 8], "float32"] in graphs[1]["inputs"]


def test_read_log_of_missing_file_is_empty(tmp_path):
    assert graph_log.read_log(tmp_path / "none.jsonl") == []


def test_count_graphs_counts_only_inside_the_block():
    torch.compile(lambda x: x + 1, backend="neuron")(torch.randn(2))
    with graph_log.count_graphs() as graphs:
        assert graphs.count == 0
        torch.compile(lambda x: x * 5, backend="neuron")(torch.randn(2))
        assert graphs.count == 1
    torch.compile(lambda x: x - 1, backend="neuron")(torch.randn(2))
    assert graphs.count == 1 and graph_log.graph_count() == 3


def test_delegates_to_real_torch_neuronx_when_not_simulated(monkeypatch):
    from hf_neuron.simulator import activation

    calls = []

    def real_backend(gm, example_inputs, **kwargs):
        calls.append(kwargs)
        return gm.forward

    monkeypatch.setattr(activation, "is_simulated", lambda: False)
    monkeypatch.setattr(activation, "real_torch_neuronx_installed", lambda: True)
    monkeypatch.setattr(compiler, "_real_backend", lambda: real_backend)
    torch.compile(lambda x: x + 1, backend="neuron", mode="max-autotune")(torch.randn(2))
    assert calls == [{"mode": "max-autotune"}]
    assert graph_log.graph_count() == 0


def test_entry_point_resolves_lazily_and_processes_share_the_log(tmp_path, monkeypatch):
    log = tmp_path / "graphs.jsonl"
    script = textwrap.dedent(
        """
        import sys, torch, torch._dynamo
        assert "hf_neuron.simulator.compiler" not in sys.modules, "imported at import torch"
        assert "neuron" in torch._dynamo.list_backends()
        assert "hf_neuron.simulator.compiler" not in sys.modules, "imported by list_backends"
        out = torch.compile(lambda x: x * 2, backend="neuron")(torch.ones(3))
        assert out.tolist() == [2.0, 2.0, 2.0]
        from hf_neuron.simulator.compiler import neuron_backend
        from torch._dynamo.backends.registry import lookup_backend
        assert lookup_backend("neuron") is neuron_backend
        """
    )
    env = dict(os.environ, HF_NEURON_GRAPH_LOG=str(log), RANK="1")
    env.pop("HF_NEURON_SIMULATOR", None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]

    monkeypatch.setenv(graph_log.LOG_ENV, str(log))
    monkeypatch.setenv("RANK", "0")
    torch.compile(lambda x: x * 3, backend="neuron")(torch.ones(3))
    records = graph_log.read_log(log)
    assert sorted(r["rank"] for r in records) == [0, 1]
    assert len({r["pid"] for r in records}) == 2

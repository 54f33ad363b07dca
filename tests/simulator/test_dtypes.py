"""Neuron's dtype narrowing: float64 computes as float32 and int64 stores as int32, silently on
Trainium; here with a one-time warning per op, or an error in strict mode."""

import subprocess
import sys
import textwrap

import pytest
import torch

import hf_neuron.simulator._extension as ext


@pytest.fixture(autouse=True)
def fresh_warnings():
    ext.load().reset_warnings()
    yield
    ext.load().set_strict_dtypes(False)


def test_float64_rounds_to_float32_with_warning():
    value = 1.0 + 1e-12
    with pytest.warns(UserWarning, match="float64 is stored and computed as float32"):
        t = torch.tensor([value], dtype=torch.float64).to("neuron")
    assert t.dtype == torch.float64  # still reports 64 bits, like TorchNeuron
    assert t.cpu().item() == 1.0  # but holds float32 precision
    assert (t * 3).cpu().item() == float(torch.tensor(3.0, dtype=torch.float32))


def test_int64_outside_int32_wraps_with_warning():
    small = torch.tensor([2**31 - 1, -(2**31)]).to("neuron")
    assert small.cpu().tolist() == [2**31 - 1, -(2**31)]
    with pytest.warns(UserWarning, match="int64 is stored as int32"):
        big = torch.tensor([2**40 + 5]).to("neuron")
    assert big.dtype == torch.int64
    assert big.cpu().item() == 5


def test_strict_mode_raises_on_float64():
    ext.load().set_strict_dtypes(True)
    with pytest.raises(RuntimeError, match="float64"):
        torch.zeros(2, dtype=torch.float64, device="neuron")
    with pytest.raises(RuntimeError, match="float64"):
        torch.ones(2, device="neuron").double()
    with pytest.raises(RuntimeError, match="int32 range"):
        torch.tensor([2**40]).to("neuron")
    assert "neuron" in repr(torch.ones(2, device="neuron"))  # printing still works


def test_strict_mode_from_environment():
    code = textwrap.dedent(
        """
        import torch
        try:
            torch.ones(2, device="neuron", dtype=torch.float64)
        except RuntimeError as e:
            print("raised", "strict" in str(e))
        """
    )
    env = {"HF_NEURON_SIMULATOR": "1", "HF_NEURON_SIM_STRICT_DTYPES": "1"}
    import os

    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True)
    assert "raised True" in out.stdout, out.stderr


def test_fp8_raises():
    with pytest.raises(RuntimeError, match="FP8"):
        torch.empty(3, dtype=torch.float8_e4m3fn, device="neuron")

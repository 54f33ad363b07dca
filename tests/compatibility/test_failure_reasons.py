"""Failure reasons name the exception and where it happened (op or frame), trimmed to one line."""

import signal

from hf_neuron.compat.levels import describe_exception
from hf_neuron.compat.procs import describe_exit, innermost_frame, last_error_line


def _raise(exc):
    try:
        raise exc
    except Exception as caught:  # noqa: BLE001
        return caught


def test_aten_op_is_the_op():
    reason, op = describe_exception(_raise(RuntimeError("Could not run 'aten::_foo.out' with arguments from the 'neuron' backend.\nmore")))
    assert reason == "RuntimeError: Could not run 'aten::_foo.out' with arguments from the 'neuron' backend. more"
    assert op == "aten::_foo.out"


def test_dynamo_wrapped_error_is_unwrapped():
    message = ("RuntimeError when making fake tensor call\n  Explanation: Dynamo failed to run FX node with fake "
               "tensors: call_function <built-in function scaled_dot_product_attention>(*(FakeTensor(...),)): "
               "got RuntimeError(\"Cannot access data pointer of Tensor\")\n  Hint: ...")
    reason, op = describe_exception(_raise(ValueError(message)), stage="compiled training step")
    assert reason == "compiled training step: ValueError: RuntimeError: Cannot access data pointer of Tensor"
    assert op == "scaled_dot_product_attention (traced by Dynamo)"


def test_frame_is_the_fallback_op():
    reason, op = describe_exception(_raise(KeyError("heavily_compressed_attention")))
    assert reason == "KeyError: 'heavily_compressed_attention'"
    assert op.startswith("tests/compatibility/test_failure_reasons.py:") or "test_failure_reasons.py" in op


FAULTHANDLER_DUMP = """\
Fatal Python error: Segmentation fault

Thread 0x00007f0000000001 (most recent call first):
  File "/work/main/hf_neuron/compat/worker.py", line 46 in loop
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007f0000000002 (most recent call first):
  File "/x/site-packages/torch/nn/functional.py", line 2551 in embedding
  File "/x/site-packages/transformers/models/llama/modeling_llama.py", line 400 in forward
  File "/work/main/hf_neuron/compat/levels.py", line 200 in level_l2
  File "/work/main/hf_neuron/compat/worker.py", line 150 in main
  File "/work/main/hf_neuron/compat/worker.py", line 160 in <module>
"""


def test_innermost_frame_of_the_main_thread():
    assert innermost_frame(FAULTHANDLER_DUMP) == (
        "torch/nn/functional.py:2551 in embedding (from transformers/models/llama/modeling_llama.py:400 in forward)")
    assert last_error_line(FAULTHANDLER_DUMP) == "Fatal Python error: Segmentation fault"
    assert innermost_frame("no stack here") is None


def test_exit_descriptions():
    assert describe_exit(-signal.SIGKILL) == "worker killed by SIGKILL (likely out of memory)"
    assert describe_exit(-signal.SIGSEGV) == "worker died with SIGSEGV"
    assert describe_exit(3) == "worker exited with code 3"

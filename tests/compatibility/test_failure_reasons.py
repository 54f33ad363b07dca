"""Failure reasons name the exception and where it happened (op or frame), trimmed to one line."""

import signal

from hf_neuron.compat.frames import package_dirs, portable_text
from hf_neuron.compat.levels import describe_exception
from hf_neuron.compat.procs import describe_exit, innermost_frame, last_error_line


def installed(package: str, relative: str) -> str:
    """The absolute path ``relative`` would have inside ``package`` as installed here."""
    directory = next(d for name, d in package_dirs() if name == package)
    return f"{directory}/{relative}"


def _raise(exc):
    try:
        raise exc
    except Exception as caught:  # noqa: BLE001
        return caught


def _caught(call) -> Exception:
    try:
        call()
    except Exception as caught:  # noqa: BLE001
        return caught
    raise AssertionError(f"{call} raised nothing")


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


def faulthandler_dump(*frames: tuple[str, str, int, str]) -> str:
    """A faulthandler dump whose main thread has ``frames`` (package, path, line, function), most
    recent first, with files where the packages are installed in this environment."""
    lines = [
        "Fatal Python error: Segmentation fault",
        "",
        "Thread 0x00007f0000000001 (most recent call first):",
        f'  File "{installed("hf_neuron", "compat/worker.py")}", line 46 in loop',
        '  File "/usr/lib/python3.11/threading.py", line 982 in run',
        "",
        "Current thread 0x00007f0000000002 (most recent call first):",
        *(f'  File "{installed(package, path)}", line {line} in {func}' for package, path, line, func in frames),
        f'  File "{installed("hf_neuron", "compat/levels.py")}", line 200 in level_l2',
        f'  File "{installed("hf_neuron", "compat/worker.py")}", line 150 in main',
        f'  File "{installed("hf_neuron", "compat/worker.py")}", line 160 in <module>',
    ]
    return "\n".join(lines) + "\n"


def test_innermost_frame_of_the_main_thread():
    dump = faulthandler_dump(("torch", "nn/functional.py", 2551, "embedding"),
                             ("transformers", "models/llama/modeling_llama.py", 400, "forward"))
    assert innermost_frame(dump) == (
        "torch/nn/functional.py:2551 in embedding (from transformers/models/llama/modeling_llama.py:400 in forward)")
    assert last_error_line(dump) == "Fatal Python error: Segmentation fault"
    assert innermost_frame("no stack here") is None


def test_hf_neuron_adapter_is_not_model_code():
    # hf_neuron's transformers adapter sits between the op and the model: it is ours, not the model.
    dump = faulthandler_dump(("torch", "nn/functional.py", 2551, "embedding"),
                             ("hf_neuron", "transformers/generation.py", 120, "generate"),
                             ("transformers", "models/llama/modeling_llama.py", 400, "forward"))
    assert innermost_frame(dump) == (
        "torch/nn/functional.py:2551 in embedding (from transformers/models/llama/modeling_llama.py:400 in forward)")


def _compiled_as(filename: str, source: str, name: str):
    """Function ``name`` from ``source``, its frames reporting ``filename`` (as if that file held it)."""
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def test_frame_is_named_relative_to_its_package():
    fail = _compiled_as(installed("hf_neuron", "transformers/generation/defaults.py"),
                        "def fail(exc):\n    raise exc\n", "fail")
    _, op = describe_exception(_caught(lambda: fail(KeyError("x"))))
    assert op == "hf_neuron/transformers/generation/defaults.py:2 in fail"


def test_harness_frames_are_not_where_it_happened():
    raise_in_harness = _compiled_as(installed("hf_neuron", "compat/levels.py"),
                                    "def check(exc):\n    raise exc\n", "check")
    model_forward = _compiled_as(installed("transformers", "models/llama/modeling_llama.py"),
                                 "def forward(check, exc):\n    check(exc)\n", "forward")
    _, op = describe_exception(_caught(lambda: model_forward(raise_in_harness, KeyError("x"))))
    assert op == "transformers/models/llama/modeling_llama.py:2 in forward"


def test_recorded_text_carries_no_install_location():
    traceback_text = (f'File "{installed("hf_neuron", "compat/diffusers/tp_check.py")}", line 92, in check_class\n'
                      f'File "{installed("diffusers", "hooks/tensor_parallel.py")}", line 394, in _check_tp_supported')
    assert portable_text(traceback_text) == (
        'File "hf_neuron/compat/diffusers/tp_check.py", line 92, in check_class\n'
        'File "diffusers/hooks/tensor_parallel.py", line 394, in _check_tp_supported')

"""Compiled training with activation checkpointing on neuron: gradients equal CPU's; without the fix
the first step of a model with dropout does not compile (of any attention model, where torch counts
attention without dropout as random); a user's own checkpointing choices are left alone."""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from hf_neuron.patching import APPLIED, get_fix, upstream_behaviour
from hf_neuron.transformers.training.checkpointing import FIX_NAME, save_random_ops_context, save_random_ops_policy

NOT_COMPILED = "[Dd]ynamic shapes|not supported for neuron"
#: A random op in every checkpointed layer.
DROPOUT = {"attention_dropout": 0.1}


@pytest.fixture
def tiny_llama(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    def load(device="cpu", **config):
        model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32, **config).to(device)
        model.train()
        return model

    return load


def _checkpoint_kwargs(model) -> dict:
    """The keyword arguments each decoder layer passes to torch.utils.checkpoint."""
    layer = model.model.layers[0]
    func = layer._gradient_checkpointing_func
    assert isinstance(func, functools.partial)
    return dict(func.keywords)


def _compiled_step(model, ids):
    compiled = torch.compile(model, backend="neuron", fullgraph=False)
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach().cpu(), {n: p.grad.detach().cpu() for n, p in model.named_parameters()}


def _ids():
    return torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(0))


def _assert_equals_the_cpu_step(tiny_llama, loss, grads):
    cpu = tiny_llama()
    cpu.activation_checkpointing_enable()
    expected = cpu(input_ids=_ids(), labels=_ids()).loss
    expected.backward()
    torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5)
    for name, param in cpu.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_compiled_checkpointed_step_equals_cpu(tiny_llama, fresh_dynamo, static_shapes):
    model = tiny_llama("neuron")
    model.activation_checkpointing_enable()  # TRL and the Trainer enable it this way (or via the deprecated name)
    assert _checkpoint_kwargs(model)["context_fn"] is save_random_ops_context
    assert get_fix(FIX_NAME).status == APPLIED

    _assert_equals_the_cpu_step(tiny_llama, *_compiled_step(model, _ids().to("neuron")))


def test_without_the_fix_the_step_does_not_compile(tiny_llama, fresh_dynamo, static_shapes):
    model = tiny_llama("neuron", **DROPOUT)
    with upstream_behaviour(FIX_NAME):
        model.gradient_checkpointing_enable()
        assert "context_fn" not in _checkpoint_kwargs(model)
        with pytest.raises(Exception, match=NOT_COMPILED):
            _compiled_step(model, _ids().to("neuron"))


def test_with_dropout_the_step_equals_the_step_without_checkpointing(tiny_llama, fresh_dynamo, static_shapes):
    """The fix saves the dropout masks drawn in the forward: the backward uses the same ones."""
    steps = []
    for checkpointing in (True, False):
        model = tiny_llama("neuron", **DROPOUT)
        if checkpointing:
            model.activation_checkpointing_enable()
        torch.manual_seed(1)
        steps.append(_compiled_step(model, _ids().to("neuron")))
    (loss, grads), (expected_loss, expected_grads) = steps
    torch.testing.assert_close(loss, expected_loss)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(grads[name], grad, msg=name)


def test_attention_without_dropout_is_saved_only_where_upstream_does_not_compile(tiny_llama, fresh_dynamo,
                                                                                  static_shapes):
    """Torch releases that do not count attention called without dropout as random (2.14) recompute it
    without RNG state: a model without dropout then compiles as upstream leaves it, and the fix
    recomputes its attention as upstream does. Elsewhere its attention has to be saved."""
    model = tiny_llama("neuron")
    model.activation_checkpointing_enable()  # probes the neuron backend
    query = torch.ones(1, 1, 2, 4, device="neuron")
    attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default  # the simulator's kernel
    assert save_random_ops_policy(None, attention, query, query, query, 0.1) == CheckpointPolicy.MUST_SAVE
    recomputed = save_random_ops_policy(None, attention, query, query, query) == CheckpointPolicy.PREFER_RECOMPUTE

    with upstream_behaviour(FIX_NAME):
        model.activation_checkpointing_enable()
        assert "context_fn" not in _checkpoint_kwargs(model)
        if recomputed:
            _assert_equals_the_cpu_step(tiny_llama, *_compiled_step(model, _ids().to("neuron")))
        else:
            with pytest.raises(Exception, match=NOT_COMPILED):
                _compiled_step(model, _ids().to("neuron"))


def test_the_users_choices_win(tiny_llama):
    def mine():
        return create_selective_checkpoint_contexts(lambda ctx, op, *a, **k: None)

    model = tiny_llama("neuron")
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False, "context_fn": mine})
    assert _checkpoint_kwargs(model)["context_fn"] is mine

    model = tiny_llama("neuron")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    assert _checkpoint_kwargs(model) == {"use_reentrant": True}

    model = tiny_llama("neuron")
    user_kwargs = {"use_reentrant": False, "preserve_rng_state": False}
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=user_kwargs)
    assert _checkpoint_kwargs(model) == {
        "use_reentrant": False, "preserve_rng_state": False, "context_fn": save_random_ops_context,
    }


def test_a_model_on_cpu_is_left_alone(tiny_llama):
    model = tiny_llama("cpu")
    model.activation_checkpointing_enable()
    assert "context_fn" not in _checkpoint_kwargs(model)


def test_input_gradient_hooks_do_not_stack_up(tiny_llama):
    """Trainers switch checkpointing off and on around generation at every step (TRL's GRPO, RLOO)."""
    from hf_neuron.transformers.training.checkpointing import HOOKS_FIX

    model = tiny_llama("neuron")
    embeddings = model.get_input_embeddings()
    for _ in range(3):
        model.activation_checkpointing_disable()
        model.activation_checkpointing_enable()
    assert len(embeddings._forward_hooks) == 1

    model = tiny_llama("neuron")
    with upstream_behaviour(HOOKS_FIX):
        for _ in range(3):
            model.activation_checkpointing_disable()
            model.activation_checkpointing_enable()
    assert len(model.get_input_embeddings()._forward_hooks) == 3

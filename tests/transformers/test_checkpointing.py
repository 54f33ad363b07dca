"""Compiled training with activation checkpointing on neuron: gradients equal CPU's; without the fix
the first step does not compile; a user's own checkpointing choices are left alone."""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.checkpoint import create_selective_checkpoint_contexts

from hf_neuron.patching import APPLIED, get_fix, upstream_behaviour
from hf_neuron.transformers.checkpointing import FIX_NAME, save_random_ops_context


@pytest.fixture
def tiny_llama(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    def load(device="cpu"):
        model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).to(device)
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


def test_compiled_checkpointed_step_equals_cpu(tiny_llama, fresh_dynamo, static_shapes):
    ids = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(0))
    cpu = tiny_llama()
    cpu.activation_checkpointing_enable()
    expected = cpu(input_ids=ids, labels=ids).loss
    expected.backward()

    model = tiny_llama("neuron")
    model.activation_checkpointing_enable()  # TRL and the Trainer enable it this way (or via the deprecated name)
    assert _checkpoint_kwargs(model)["context_fn"] is save_random_ops_context
    assert get_fix(FIX_NAME).status == APPLIED

    loss, grads = _compiled_step(model, ids.to("neuron"))
    torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5)
    for name, param in cpu.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_without_the_fix_the_step_does_not_compile(tiny_llama, fresh_dynamo, static_shapes):
    ids = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(0)).to("neuron")
    model = tiny_llama("neuron")
    with upstream_behaviour(FIX_NAME):
        model.gradient_checkpointing_enable()
        assert "context_fn" not in _checkpoint_kwargs(model)
        with pytest.raises(Exception, match="[Dd]ynamic shapes|not supported for neuron"):
            _compiled_step(model, ids)


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
    from hf_neuron.transformers.checkpointing import HOOKS_FIX

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

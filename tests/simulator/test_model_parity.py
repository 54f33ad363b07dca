"""A tiny Llama on neuron gives CPU's logits and gradients bit for bit."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


def test_forward_and_backward_bit_identical():
    cpu = tiny_llama()
    dev = tiny_llama().to("neuron")
    ids = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(1))
    out_cpu = cpu(input_ids=ids, labels=ids)
    out_dev = dev(input_ids=ids.to("neuron"), labels=ids.to("neuron"))
    assert torch.equal(out_cpu.logits, out_dev.logits.cpu())
    assert torch.equal(out_cpu.loss, out_dev.loss.cpu())
    out_cpu.loss.backward()
    out_dev.loss.backward()
    for (name, p_cpu), p_dev in zip(cpu.named_parameters(), dev.parameters()):
        assert torch.equal(p_cpu.grad, p_dev.grad.cpu()), name


def test_static_cache_greedy_generate_matches_cpu():
    cpu = tiny_llama()
    dev = tiny_llama().to("neuron")
    ids = torch.randint(0, 128, (1, 10), generator=torch.Generator().manual_seed(2))
    kwargs = dict(max_new_tokens=8, do_sample=False, cache_implementation="static", pad_token_id=0)
    ref = cpu.generate(ids, **kwargs)
    got = dev.generate(ids.to("neuron"), **kwargs)
    assert torch.equal(ref, got.cpu())

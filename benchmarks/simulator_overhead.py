"""Simulator overhead: what running on the simulated `neuron` device costs over plain CPU.

Prints, from one run: per-op time of small ops on neuron and on CPU (and the difference, the
simulator's per-op overhead), and tiny-Llama forward and forward+backward time as neuron/CPU ratios.
Run: HF_NEURON_SIMULATOR=1 python benchmarks/simulator_overhead.py
"""

from __future__ import annotations

import argparse
import time

import torch


def per_call_seconds(fn, repeat: int) -> float:
    for _ in range(max(3, repeat // 20)):
        fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best


def small_ops(repeat: int) -> None:
    print(f"{'op (16 floats)':<22}{'cpu us':>10}{'neuron us':>12}{'overhead us':>13}{'ratio':>8}")
    for name, make in [
        ("add", lambda d: (lambda a=torch.ones(16, device=d), b=torch.ones(16, device=d): a + b)),
        ("mul_ (in place)", lambda d: (lambda a=torch.ones(16, device=d): a.mul_(1.0))),
        ("view + slice", lambda d: (lambda a=torch.ones(16, device=d): a.view(4, 4)[1:])),
        ("matmul 4x4", lambda d: (lambda a=torch.ones(4, 4, device=d): a @ a)),
        ("softmax", lambda d: (lambda a=torch.ones(16, device=d): a.softmax(-1))),
        ("index_copy_", lambda d: (lambda a=torch.zeros(4, 4, device=d), i=torch.tensor([1], device=d),
                                   s=torch.ones(1, 4, device=d): a.index_copy_(0, i, s))),
    ]:
        cpu = per_call_seconds(make("cpu"), repeat) * 1e6
        neuron = per_call_seconds(make("neuron"), repeat) * 1e6
        print(f"{name:<22}{cpu:>10.2f}{neuron:>12.2f}{neuron - cpu:>13.2f}{neuron / cpu:>8.2f}x")


def tiny_llama(repeat: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    cpu_model = LlamaForCausalLM(config)
    neuron_model = LlamaForCausalLM(config)
    neuron_model.load_state_dict(cpu_model.state_dict())
    neuron_model.to("neuron")
    ids = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(0))
    ids_n = ids.to("neuron")

    def fwd(model, x):
        def run():
            with torch.no_grad():
                model(input_ids=x)
        return run

    def fwd_bwd(model, x):
        def run():
            model.zero_grad(set_to_none=True)
            model(input_ids=x, labels=x).loss.backward()
        return run

    for label, make in (("forward", fwd), ("forward+backward", fwd_bwd)):
        cpu = per_call_seconds(make(cpu_model, ids), repeat)
        neuron = per_call_seconds(make(neuron_model, ids_n), repeat)
        print(f"tiny Llama {label:<18} cpu {cpu * 1e3:7.2f} ms  neuron {neuron * 1e3:7.2f} ms  "
              f"ratio {neuron / cpu:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000, help="calls per small-op measurement")
    parser.add_argument("--model-repeat", type=int, default=30, help="calls per model measurement")
    args = parser.parse_args()
    if not (hasattr(torch, "neuron") and torch.neuron.is_available()):
        from hf_neuron.simulator import install

        install()
    small_ops(args.repeat)
    tiny_llama(args.model_repeat)


if __name__ == "__main__":
    main()

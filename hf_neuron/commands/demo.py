"""`hf-neuron demo`: the smallest end-to-end run a user would do on Trainium.

Writes a tiny random checkpoint, loads it with ``device_map="neuron"``, generates greedily with a
static cache, and checks the tokens against the same generation on CPU.
"""

from __future__ import annotations

import tempfile
import time


def run(args) -> int:
    import torch

    if not (hasattr(torch, "neuron") and torch.neuron.is_available()):
        print(
            "hf-neuron demo: no neuron device. On Trainium install torch-neuronx; anywhere else run with "
            "HF_NEURON_SIMULATOR=1 to use the simulated device."
        )
        return 1
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_neuron.tiny_models import save_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        path = save_tiny_model(args.arch, tmp, seed=0)
        tokenizer = AutoTokenizer.from_pretrained(path)
        messages = [{"role": "user", "content": "Hello Trainium, what is a NeuronCore?"}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=False, cache_implementation="static")

        cpu_model = AutoModelForCausalLM.from_pretrained(path)
        expected = cpu_model.generate(**prompt, **kwargs)

        start = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(path, device_map="neuron")
        on_neuron = sum(p.device.type == "neuron" for p in model.parameters())
        total = sum(1 for _ in model.parameters())
        got = model.generate(**{k: v.to(model.device) for k, v in prompt.items()}, **kwargs)
        elapsed = time.perf_counter() - start

    same = torch.equal(expected, got.cpu())
    simulated = " (simulated)" if getattr(__import__("hf_neuron.simulator").simulator, "is_simulated")() else ""
    print(f"model: tiny {args.arch}, {on_neuron}/{total} parameters on {model.device}{simulated}")
    print(f"generated {got.shape[1] - prompt['input_ids'].shape[1]} tokens in {elapsed:.1f}s")
    print(f"tokens equal to CPU: {same}")
    return 0 if same and on_neuron == total else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="load a tiny model with device_map='neuron', generate, compare with CPU")
    p.add_argument("--arch", default="llama", help="model_type of the tiny model (default: llama)")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.set_defaults(func=run)

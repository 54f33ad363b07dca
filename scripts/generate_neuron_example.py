#!/usr/bin/env python
"""Tensor-parallel chat generation with Transformers on AWS Trainium (device "neuron").

Every process holds 1/WORLD_SIZE of the weights on its own neuron device
(``DistributedConfig(tp_size=WORLD_SIZE)`` over a ``DeviceMesh("neuron", ...)``) and runs the same
greedy ``generate``; rank 0 prints the answers. One process (plain ``python``) runs the whole model
on ``neuron:0``.

    torchrun --nproc_per_node=4 scripts/generate_neuron_example.py --model Qwen/Qwen3-8B
    HF_NEURON_SIMULATOR=1 torchrun --nproc_per_node=2 scripts/generate_neuron_example.py --model DIR

``--model`` takes a Hub id or a local directory (``hf-neuron tiny-model qwen3 DIR`` writes a tiny
one). The generation recipe below is spelled out: a static cache of ``--max-cache-len`` tokens,
prefill in chunks of ``--prefill-chunk-size`` tokens, prompts left padded to a multiple of the chunk
size, and a static-shape "neuron" compile config; that compiles two graphs (one prefill chunk, one
decode step) per batch size. With hf_neuron installed, ``generate`` fills in the same recipe when
you leave it out.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from transformers import AutoModelForCausalLM, AutoTokenizer, CompileConfig, DistributedConfig

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
DEFAULT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="Hub id or local model directory")
    parser.add_argument("--prompt", action="append", help="a user message (repeatable; default: two examples)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--max-cache-len", type=int, default=1024, help="static cache length (every graph is compiled for it)"
    )
    parser.add_argument("--prefill-chunk-size", type=int, default=512)
    parser.add_argument("--dtype", default="auto", help="auto (checkpoint dtype), bfloat16, float32, ...")
    return parser.parse_args(argv)


def load_model(path: str, dtype: str):
    """The model on this process's neuron device, sharded over all processes when there are several."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, device_map="neuron")
    # The Neuron runtime must not be initialised before the process group.
    dist.init_process_group(backend="neuron")
    mesh = DeviceMesh("neuron", list(range(world_size)))
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, distributed_config=DistributedConfig(tp_size=world_size), device_mesh=mesh
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.prefill_chunk_size > args.max_cache_len:
        print(
            f"--prefill-chunk-size ({args.prefill_chunk_size}) must not exceed --max-cache-len ({args.max_cache_len}).",
            file=sys.stderr,
        )
        return 2
    model = load_model(args.model, args.dtype)
    tokenizer = AutoTokenizer.from_pretrained(args.model)

    conversations = [[{"role": "user", "content": prompt}] for prompt in (args.prompt or DEFAULT_PROMPTS)]
    inputs = tokenizer.apply_chat_template(
        conversations,
        add_generation_prompt=True,
        padding=True,
        return_tensors="pt",
        return_dict=True,
        # Left padding to a multiple of the chunk: every prefill chunk has the one compiled shape.
        tokenizer_kwargs={"padding_side": "left", "pad_to_multiple_of": args.prefill_chunk_size},
    ).to(model.device)
    prompt_length = inputs["input_ids"].shape[1]
    if prompt_length + args.max_new_tokens > args.max_cache_len:
        print(
            f"The padded prompts ({prompt_length} tokens) + --max-new-tokens ({args.max_new_tokens}) do not fit "
            f"--max-cache-len ({args.max_cache_len}); raise --max-cache-len or shorten the prompts.",
            file=sys.stderr,
        )
        return 2

    with torch.no_grad():
        output = model.generate(
            **inputs,
            max_new_tokens=args.max_new_tokens,
            do_sample=False,
            cache_implementation="static",
            max_cache_len=args.max_cache_len,
            prefill_chunk_size=args.prefill_chunk_size,
            compile_config=CompileConfig(backend="neuron", fullgraph=False, dynamic=False, mode="default"),
        )

    answers = tokenizer.batch_decode(output[:, prompt_length:], skip_special_tokens=True)
    if int(os.environ.get("RANK", "0")) == 0:
        for prompt, answer in zip(args.prompt or DEFAULT_PROMPTS, answers):
            print(f"### {prompt}\n{answer}\n", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

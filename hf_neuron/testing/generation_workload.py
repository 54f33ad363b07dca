"""The generation workload that measures how many graphs greedy generation compiles, shared by the
tests and ``benchmarks/generation_graphs.py``.

8 greedy prompts of 20-140 tokens, ``max_cache_len=256``, ``prefill_chunk_size=32``, 16 new
tokens, run one batch at a time (batch size 1: 8 calls; batch size 4: 2 calls, left padded to the
longest prompt). The physical minimum is 2 graphs per (batch size, max_cache_len): one prefill
chunk graph and one decode graph. :func:`add_benchmark_arguments` and :func:`start_benchmark` are the
command-line set-up the generation benchmarks share.
"""

from __future__ import annotations

import torch

PROMPT_LENGTHS = (20, 37, 55, 71, 90, 104, 123, 140)
MAX_CACHE_LEN = 256
PREFILL_CHUNK_SIZE = 32
MAX_NEW_TOKENS = 16
SLIDING_WINDOW = 64


def tiny_workload_model(kind: str, *, seed: int = 0):
    """Tiny random Llama ("dense") or Mistral with a 64-token window ("sliding"), on CPU."""
    from hf_neuron.tiny_models import build_model

    if kind == "dense":
        return build_model("llama", seed=seed)
    if kind == "sliding":
        return build_model("mistral", seed=seed, sliding_window=SLIDING_WINDOW)
    raise ValueError(f"unknown workload model {kind!r}: use 'dense' or 'sliding'")


def workload_prompts(vocab_size: int, lengths=PROMPT_LENGTHS, *, seed: int = 1, low: int = 3) -> list[torch.Tensor]:
    """Random token ids (never the special ids 0-2) for each prompt length."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(low, vocab_size, (n,), generator=generator) for n in lengths]


def left_pad(prompts: list[torch.Tensor], pad_token_id: int, multiple: int | None = None):
    """``(input_ids, attention_mask)`` left padded to the longest prompt (rounded up to ``multiple``)."""
    length = max(len(p) for p in prompts)
    if multiple:
        length = -(-length // multiple) * multiple
    input_ids = torch.full((len(prompts), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), length), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, length - len(prompt) :] = prompt
        attention_mask[row, length - len(prompt) :] = 1
    return input_ids, attention_mask


def generate_batches(
    model,
    prompts: list[torch.Tensor],
    batch_size: int,
    *,
    pad_multiple: int | None = None,
    max_new_tokens: int = MAX_NEW_TOKENS,
    **generate_kwargs,
) -> list[torch.Tensor]:
    """Greedy-generate ``prompts`` ``batch_size`` at a time; returns the new tokens (on CPU) per batch."""
    pad_token_id = model.generation_config.pad_token_id
    device = model.device
    new_tokens = []
    for start in range(0, len(prompts), batch_size):
        input_ids, attention_mask = left_pad(prompts[start : start + batch_size], pad_token_id, pad_multiple)
        with torch.no_grad():
            out = model.generate(
                input_ids.to(device),
                attention_mask=attention_mask.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                **generate_kwargs,
            )
        new_tokens.append(out[:, input_ids.shape[1] :].cpu())
    return new_tokens


def generate_counting_graphs(model, prompts: list[torch.Tensor], batch_size: int, **generate_kwargs):
    """``(graphs compiled, new tokens)`` of :func:`generate_batches` from a fresh Dynamo state."""
    from hf_neuron.graphs import count_graphs

    torch._dynamo.reset()
    with count_graphs() as graphs:
        tokens = generate_batches(model, prompts, batch_size, **generate_kwargs)
    return graphs.count, tokens


def is_text_graph(record: dict) -> bool:
    """Whether a graph recorded by :func:`hf_neuron.graphs.count_graphs` is the text decoder's (it takes token
    embeddings or ids); every other graph ``generate`` compiles with images is the vision tower's."""
    return any("inputs_embeds" in name or "input_ids" in name for name in record.get("names") or ())


def generate_from_images_counting_graphs(model, inputs: dict, **generate_kwargs):
    """``(tokens on CPU, text graphs, vision graphs)`` of ``model.generate`` on ``inputs`` (a processor's
    output), moved to the model's device."""
    from hf_neuron.graphs import count_graphs

    with torch.no_grad(), count_graphs() as graphs:
        out = model.generate(**{k: v.to(model.device) for k, v in inputs.items()}, **generate_kwargs)
    text = sum(1 for record in graphs.records if is_text_graph(record))
    return out.cpu(), text, graphs.count - text


def compiled_recipe(**overrides) -> dict:
    """The generate() arguments of the workload (static cache, cache length, chunk size)."""
    recipe = {
        "cache_implementation": "static",
        "max_cache_len": MAX_CACHE_LEN,
        "prefill_chunk_size": PREFILL_CHUNK_SIZE,
    }
    recipe.update(overrides)
    return recipe


def add_benchmark_arguments(parser) -> None:
    """The options every generation benchmark takes: batch sizes, Dynamo's recompile limit, CPU threads."""
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--recompile-limit", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (tiny models: 1 avoids contention)")


def start_benchmark(args) -> bool:
    """Set threads and Dynamo for counting graphs (static shapes, ``args.recompile_limit``); False, with
    a message saying what to do, when there is no neuron device."""
    import sys

    if not hasattr(torch, "neuron") or not torch.neuron.is_available():
        print("No neuron device: run on Trainium or with HF_NEURON_SIMULATOR=1.", file=sys.stderr)
        return False
    torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = args.recompile_limit
    torch._dynamo.config.automatic_dynamic_shapes = False
    return True

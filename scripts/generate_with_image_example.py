#!/usr/bin/env python
"""Generation from prompts with an image, with Transformers on AWS Trainium (device "neuron").

The user code is what runs on a GPU: the processor turns prompts and images into model inputs, and
``generate`` answers. On a neuron device hf_neuron compiles the vision tower once per processed image
size (the processor's resize decides it: a fixed-size processor such as LLaVA's gives every image one
shape) and the text decoder's prefill-chunk and decode graphs, so a second image of another size
compiles nothing. The script prints the answers and how many graphs each call compiled.

    python scripts/generate_with_image_example.py --model llava-hf/llava-1.5-7b-hf
    hf-neuron tiny-model --images llava /tmp/tiny-llava
    HF_NEURON_SIMULATOR=1 python scripts/generate_with_image_example.py --model /tmp/tiny-llava

Images come from ``--image`` (files, one per prompt) or, without it, two random pictures of different
sizes. ``--image-token`` is what the prompt writes where the image goes (LLaVA's ``<image>``).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from hf_neuron.graphs import count_graphs

DEFAULT_MODEL = "llava-hf/llava-1.5-7b-hf"
DEFAULT_PROMPTS = ["What is in this picture?", "Describe the colours."]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="Hub id or local model directory")
    parser.add_argument("--image", action="append", default=None, metavar="FILE", help="an image file (repeatable)")
    parser.add_argument("--image-token", default="<image>", help="what a prompt writes for its image")
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--dtype", default="bfloat16", help="bfloat16 (default) or float32")
    return parser.parse_args(argv)


def images(files: list[str] | None) -> list[Image.Image]:
    if files:
        return [Image.open(f).convert("RGB") for f in files]
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in ((480, 640), (300, 200))]


def main(argv=None) -> None:
    args = parse_args(argv)
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=getattr(torch, args.dtype),
                                                        device_map="neuron")
    processor = AutoProcessor.from_pretrained(args.model, padding_side="left")
    for prompt, image in zip(DEFAULT_PROMPTS, images(args.image)):
        inputs = processor(text=[f"{args.image_token}{prompt}"], images=[image], return_tensors="pt").to("neuron")
        with count_graphs() as graphs:
            out = model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False)
        answer = processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)[0]
        print(f"[{image.width}x{image.height} image, {graphs.count} graphs compiled] {prompt} -> {answer!r}")


if __name__ == "__main__":
    main()

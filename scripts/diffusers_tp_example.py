"""Qwen-Image-2.1 with tensor parallelism on Trainium — the announcement's recipe, with the model path as argument.

On Trainium (8 logical cores per process group here)::

    NEURON_LOGICAL_NC_CONFIG=2 torchrun --nproc_per_node=8 scripts/diffusers_tp_example.py /models/Qwen-Image-2.1

On the simulated device, with a tiny random pipeline built and saved locally::

    HF_NEURON_SIMULATOR=1 python scripts/diffusers_tp_example.py --make-tiny /tmp/tiny-qwen-image
    HF_NEURON_SIMULATOR=1 torchrun --nproc_per_node=2 scripts/diffusers_tp_example.py /tmp/tiny-qwen-image \\
        --dtype float32 --height 32 --width 32 --steps 4 --images 2 --out /tmp/image.png

The tiny pipeline is Qwen-Image-2.1's own: its text encoder's Qwen3-VL processor builds and loads without
torchvision, which a Neuron host often lacks (hf_neuron's fix ``video-processor-without-torchvision``).

The recipe: the transformer is loaded sharded (``from_pretrained(..., parallel_config=TensorParallelConfig(
mesh=DeviceMesh("neuron", ...)))``, each rank reading only its slice), the VAE goes to the neuron device,
the text encoder stays on CPU (``encode_prompt(..., device="cpu")``, embeddings then moved to the
device), the transformer's repeated blocks are compiled (``compile_repeated_blocks(backend="neuron",
fullgraph=True, dynamic=False)``) and every rank uses a CPU generator with the same seed. Rank 0
saves the image, and prints the graphs each image compiled: one per block structure and input shape
for the first, none for the next (``--images 2``). Any pipeline whose ``encode_prompt`` returns
``(prompt_embeds, prompt_embeds_mask, ...)`` works the same way (``--tiny-family qwenimage`` builds Qwen-Image).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="pipeline directory (or Hub id) saved with save_pretrained")
    parser.add_argument("--prompt", default="A watercolor fox reading a book under a tree")
    parser.add_argument("--height", type=int, default=1024)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--out", default="qwen_image_tp.png", help="where rank 0 saves the image")
    parser.add_argument("--no-compile", action="store_true", help="run the transformer eagerly")
    parser.add_argument("--vae-device", default="neuron", choices=("neuron", "cpu"),
                        help="where the VAE decodes (the recipe: neuron)")
    parser.add_argument("--make-tiny", metavar="DIR", help="build a tiny random pipeline, save it to DIR and exit")
    parser.add_argument("--tiny-family", default="qwenimage21", choices=("qwenimage21", "qwenimage"),
                        help="tiny pipeline to build with --make-tiny")
    parser.add_argument("--images", type=int, default=1,
                        help="images to draw with the same seed (rank 0 saves the last; each reports its graphs)")
    args = parser.parse_args(argv)
    if not args.make_tiny and not args.model:
        parser.error("give the pipeline directory (or --make-tiny DIR)")
    if args.images < 1:
        parser.error(f"--images must be at least 1, got {args.images}")
    return args


def make_tiny(out_dir: str, family: str) -> None:
    from hf_neuron.testing.tiny_pipelines import save_tiny_pipeline

    save_tiny_pipeline(family, out_dir)
    print(f"saved a tiny {family} pipeline to {out_dir}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.make_tiny:
        make_tiny(args.make_tiny, args.tiny_family)
        return 0

    import diffusers
    from diffusers import DiffusionPipeline, TensorParallelConfig
    from torch.distributed.device_mesh import DeviceMesh

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dist.init_process_group(backend="neuron")
    torch.neuron.set_device(local_rank)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("neuron", local_rank)
    mesh = DeviceMesh("neuron", list(range(world_size)))
    dtype = getattr(torch, args.dtype)

    # The transformer class comes from the pipeline's model_index.json (QwenImage21Transformer2DModel for 2.1).
    index = DiffusionPipeline.load_config(args.model)
    transformer_cls = getattr(diffusers, index["transformer"][1])
    transformer = transformer_cls.from_pretrained(
        args.model, subfolder="transformer", torch_dtype=dtype, parallel_config=TensorParallelConfig(mesh=mesh)
    )
    pipe = DiffusionPipeline.from_pretrained(args.model, transformer=transformer, torch_dtype=dtype)
    if args.vae_device == "neuron":
        pipe.vae.to(device)
    else:
        # Decode on CPU: hand the VAE CPU latents.
        decode = pipe.vae.decode
        pipe.vae.decode = lambda z, *a, **k: decode(z.to("cpu"), *a, **k)

    # Text encoder on CPU; the embeddings go to the device.
    encoded = pipe.encode_prompt(prompt=args.prompt, device="cpu")
    prompt_embeds = encoded[0].to(device)
    prompt_embeds_mask = encoded[1].to(device) if encoded[1] is not None else None

    if not args.no_compile:
        pipe.transformer.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)

    from hf_neuron.graphs import count_graphs

    call = {"prompt_embeds": prompt_embeds, "prompt_embeds_mask": prompt_embeds_mask, "height": args.height,
            "width": args.width, "num_inference_steps": args.steps}
    if "true_cfg_scale" in pipe.__call__.__code__.co_varnames:
        call["true_cfg_scale"] = 1.0  # no negative prompt
    for index in range(1, args.images + 1):
        generator = torch.Generator("cpu").manual_seed(args.seed)  # the same noise on every rank and image
        with count_graphs() as graphs:
            image = pipe(**call, generator=generator).images[0]
        if rank == 0:
            print(f"image {index}: {graphs.count} graph(s) compiled", flush=True)

    if rank == 0:
        image.save(args.out)
        print(f"rank 0 saved {args.out} ({image.size[0]}x{image.size[1]}, tp={world_size})", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

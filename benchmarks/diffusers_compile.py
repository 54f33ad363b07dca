"""Graphs compiled over a 4-step denoising loop: whole-model ``torch.compile`` vs ``compile_repeated_blocks``.

    HF_NEURON_SIMULATOR=1 python benchmarks/diffusers_compile.py [--classes A,B] [--steps 4]

The benchmark is :mod:`hf_neuron.compat.diffusers.compile_benchmark` (``hf-neuron compat diffusers``
runs it as its last step, in a wheel install too); this script runs it from a checkout.
"""

from hf_neuron.compat.diffusers.compile_benchmark import main

if __name__ == "__main__":
    raise SystemExit(main())

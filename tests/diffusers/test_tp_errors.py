"""Bad tensor-parallel input: each rejection names the class and the constraint, before anything is sharded."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import diffusers
import pytest
import torch
from diffusers import TensorParallelConfig

from hf_neuron.testing.tiny_diffusers import TINY


def _tiny(class_name: str, **overrides):
    spec = TINY[class_name]
    torch.manual_seed(0)
    return spec.model_class()(**{**spec.config, **overrides})


def _untouched(model) -> bool:
    from torch.distributed.tensor import DTensor

    return model._parallel_config is None and not any(isinstance(p, DTensor) for p in model.parameters())


def test_degree_not_dividing_heads_config_key():
    model = _tiny("SD3Transformer2DModel", num_attention_heads=3)
    with pytest.raises(ValueError, match=r"SD3Transformer2DModel.*must divide the number of attention heads \(3\)"):
        model.enable_parallelism(config=TensorParallelConfig(tp_degree=2))
    assert _untouched(model)


def test_degree_not_dividing_heads_of_a_layer():
    # Z-Image names its head count `n_heads`, which diffusers' own check does not read.
    model = _tiny("ZImageTransformer2DModel", n_heads=3, n_kv_heads=3, dim=36)
    with pytest.raises(ValueError, match=r"Cannot shard ZImageTransformer2DModel across 2 .*heads=3"):
        model.enable_parallelism(config=TensorParallelConfig(tp_degree=2))
    assert _untouched(model)


def test_degree_not_dividing_ffn_width():
    model = _tiny("WanTransformer3DModel", ffn_dim=33)
    with pytest.raises(ValueError, match=r"WanTransformer3DModel: .*ffn\.net\.0\.proj.*33.*not divisible by 2"):
        model.enable_parallelism(config=TensorParallelConfig(tp_degree=2))
    assert _untouched(model)


def test_class_without_plan():
    model = diffusers.TransformerTemporalModel(num_attention_heads=2, attention_head_dim=8, in_channels=16,
                                               num_layers=1, norm_num_groups=4)
    with pytest.raises(ValueError, match=r"TransformerTemporalModel cannot be sharded .*no `_tp_plan`.*UNet"):
        model.enable_parallelism(config=TensorParallelConfig(tp_degree=2))


def test_class_without_plan_from_pretrained(tmp_path):
    diffusers.TransformerTemporalModel(num_attention_heads=2, attention_head_dim=8, in_channels=16, num_layers=1,
                                       norm_num_groups=4).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"TransformerTemporalModel cannot be sharded .*no `_tp_plan`"):
        diffusers.TransformerTemporalModel.from_pretrained(tmp_path, parallel_config=TensorParallelConfig(tp_degree=2))


def test_device_map(tmp_path):
    TINY["SD3Transformer2DModel"].build().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"SD3Transformer2DModel.*`device_map` cannot be combined"):
        diffusers.SD3Transformer2DModel.from_pretrained(
            tmp_path, device_map="cpu", parallel_config=TensorParallelConfig(tp_degree=2)
        )


_OFFLOAD_CHECK = """
import tempfile, torch, torch.distributed as dist
from diffusers import DiffusionPipeline, TensorParallelConfig
from torch.distributed.device_mesh import init_device_mesh
from hf_neuron.testing.tiny_diffusers import TINY

class OnePipeline(DiffusionPipeline):
    def __init__(self, transformer):
        super().__init__()
        self.register_modules(transformer=transformer)

dist.init_process_group("neuron", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1)
model = TINY["ChromaTransformer2DModel"].build()
model.enable_parallelism(config=TensorParallelConfig(mesh=init_device_mesh("neuron", (1,))))
try:
    getattr(OnePipeline(model), "{offload}")(device="neuron")
except ValueError as exc:
    print("REJECTED:", exc)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("offload", ["enable_model_cpu_offload", "enable_sequential_cpu_offload"])
def test_cpu_offload_of_a_sharded_model(offload):
    # A fresh process: the neuron runtime must not be in use before init_process_group.
    env = {**os.environ, "HF_NEURON_SIMULATOR": "1"}
    result = subprocess.run([sys.executable, "-c", _OFFLOAD_CHECK.replace("{offload}", offload)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert re.search(r"REJECTED: .*ChromaTransformer2DModel.*sharded with tensor parallelism.*CPU-offloaded",
                     result.stdout), result.stdout[-2000:] + result.stderr[-4000:]


def test_upstream_rejections_do_not_name_the_class():
    from hf_neuron.patching import upstream_behaviour

    model = _tiny("WanTransformer3DModel", ffn_dim=33)
    with upstream_behaviour("diffusers.tp_clear_errors"):
        with pytest.raises(ValueError) as upstream:
            model.enable_parallelism(config=TensorParallelConfig(tp_degree=2))
    assert "WanTransformer3DModel" not in str(upstream.value), upstream.value
    assert _untouched(model)

"""Statistics over a width that tensor parallelism shards: Gemma 3n's activation sparsity.

Gemma 3n's first decoder layers sparsify the MLP's gate activations with a "Gaussian top-k": every
activation below ``mean + std * icdf(sparsity)`` over the intermediate width is zeroed
(``Gemma3nTextMLP._gaussian_topk``). Transformers' tensor-parallel plan shards ``gate_proj``
column-wise, so each rank holds a slice of that width and computes the mean and standard deviation
of its slice only: the cutoff differs on every rank and TP=2 logits differ from one device (measured
on a tiny model: 0.15 where the logits are at most 0.6).

Where the gate projection is sharded, the patch reduces the sums behind the mean and the variance
over the ranks that hold the slices (two sums, as ``torch.std`` computes them: mean first, then the
squared deviations), and applies the same cutoff on every rank. An unsharded MLP runs upstream's code.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, wrap

FIX_NAME = "gemma3n-activation-sparsity-over-shards"
GEMMA3N_MODULE = "transformers.models.gemma3n.modeling_gemma3n"


def _shard_group(weight):
    """``(process group, ranks)`` over which ``weight``'s output rows are split, else None."""
    from torch.distributed.tensor import DTensor

    if not isinstance(weight, DTensor):
        return None
    for mesh_dim, placement in enumerate(weight.placements):
        if placement.is_shard(0):
            return weight.device_mesh.get_group(mesh_dim), weight.device_mesh.size(mesh_dim)
    return None


def _gaussian_topk_over_shards(original, self, inputs: torch.Tensor) -> torch.Tensor:
    sharded = _shard_group(self.gate_proj.weight)
    if sharded is None:
        return original(self, inputs)
    from torch.distributed._functional_collectives import all_reduce

    group, ranks = sharded
    width = inputs.shape[-1] * ranks
    sparsity = torch.tensor(self.activation_sparsity, dtype=torch.float32, device=inputs.device)
    std_multiplier = torch.distributions.normal.Normal(0, 1).icdf(sparsity).type(inputs.dtype)
    mean = all_reduce(inputs.sum(dim=-1, keepdim=True), "sum", group) / width
    variance = all_reduce((inputs - mean).pow(2).sum(dim=-1, keepdim=True), "sum", group) / width
    return torch.nn.functional.relu(inputs - (mean + variance.sqrt() * std_multiplier))


def _sharded_gate_changes_the_cutoff() -> bool:
    """The gap, by behaviour: the plan splits ``gate_proj``'s outputs, and the sparsified activations of
    a whole row are not those of its halves (the statistics span the row)."""
    from transformers import Gemma3nTextConfig
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nTextMLP

    style = (Gemma3nTextConfig.base_model_tp_plan or {}).get("layers.*.mlp.gate_proj")
    if style is None or "colwise" not in style:
        return False
    config = Gemma3nTextConfig(hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                               activation_sparsity_pattern=[0.5])
    mlp = Gemma3nTextMLP(config, layer_idx=0)
    row = torch.arange(8, dtype=torch.float32).reshape(1, 8)
    halves = torch.cat([mlp._gaussian_topk(part) for part in row.split(4, dim=-1)], dim=-1)
    return not torch.equal(mlp._gaussian_topk(row), halves)


@fix(FIX_NAME, "transformers", _sharded_gate_changes_the_cutoff, waits_for=GEMMA3N_MODULE)
def patch_gaussian_topk() -> None:
    """Gemma 3n's activation sparsity takes the mean and standard deviation of the gate activations
    over the width that tensor parallelism shards, so each rank computes its own cutoff: TP logits
    differ from one device.

    Detected by reading the plan's style for ``mlp.gate_proj`` (column-wise: outputs split) and by
    checking that the sparsified activations of a row differ from those of its halves. Patch: on a
    sharded MLP the sums behind the statistics are reduced over the ranks.
    """
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nTextMLP

    wrap(FIX_NAME, Gemma3nTextMLP, "_gaussian_topk", _gaussian_topk_over_shards)

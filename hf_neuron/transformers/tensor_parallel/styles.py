"""Parallel styles that Transformers' TP plans cannot express, for hf_neuron's plans only.

Transformers shards a model with named styles (``"colwise"``, ``"rowwise"``, ...) from its
``ALL_PARALLEL_STYLES`` registry, and those cover ``nn.Linear`` layers whose fused outputs split into
equal pieces. Several top-100 architectures need a little more, and the registry is the extension
point for it: hf_neuron registers these styles under ``hf_neuron.*`` names (see
:mod:`hf_neuron.transformers.tensor_parallel.plans` for which plan uses which).

Every style's methods take, and ignore, keywords beyond the ones they use (``**upstream_keywords``):
Transformers' sharding code passes its styles more keywords from one release to the next (``config=``
and ``mesh_manager=`` since 5.25), and a style that named only today's would fail with a TypeError on
the next release.

Every style runs its module on local tensors (each rank holds plain tensors of its own share; the
parameters are DTensors so that ``from_pretrained`` reads each rank's slice from the checkpoint):

- ``hf_neuron.conv1d_colwise`` / ``hf_neuron.conv1d_packed3_colwise`` / ``hf_neuron.conv1d_rowwise``:
  GPT-2's ``Conv1D`` keeps its weight as ``[in, out]`` (the transpose of ``nn.Linear``) and has no
  ``out_features``, so upstream's styles reject it. ``packed3`` is the fused ``c_attn`` whose output is
  split into equal q, k and v thirds: each rank keeps its heads' slice of each third.
- ``hf_neuron.packed3_colwise``: an ``nn.Linear`` whose output is ``chunk(3)``-ed into q, k, v (MPT's
  ``Wqkv``); upstream's ``packed_colwise`` is registered for two pieces (gate and up) only.
- ``hf_neuron.query_colwise_kv_replicated``: a fused projection of multi-query attention whose output
  is ``[queries | one key head | one value head]`` (GPT-BigCode's ``c_attn``, Falcon's
  ``query_key_value``). The single key/value head cannot be split, and a DTensor cannot hold a weight
  half sharded and half replicated, so the weight stays whole on every rank and each rank computes
  only its query heads plus the shared key and value.
- ``hf_neuron.sharded_rmsnorm``: an RMSNorm applied to a column-sharded activation (BitNet's
  ``attn_sub_norm`` / ``ffn_sub_norm`` normalise the attention output and the gated MLP activation
  before the row-sharded projection). Each rank holds its slice of the weight; the mean of squares is
  all-reduced, so the result equals the rank's slice of the unsharded norm.
- ``hf_neuron.packed2_colwise``: upstream's ``packed_colwise`` for an ``nn.Linear`` with a bias (Mamba's
  ``in_proj`` chunked into ``x`` and ``z``): upstream shards the bias contiguously, not piece by piece.
- ``hf_neuron.shard0``: parameters sharded on their first dimension, read directly by the enclosing
  module's forward (Mamba's depthwise ``conv1d`` weight ``[channels, 1, kernel]`` and ``dt_proj``).
- ``hf_neuron.mixer_local``: a recurrent mixer whose forward reads its children's weights directly
  (``self.conv1d.weight``): its own per-channel parameters (``A_log``, ``D``) are sharded on their first
  dimension, and while it runs every parameter below it is its local shard.
- ``hf_neuron.rwkv_attention``: RWKV's time mixing with its channels sharded. ``time_decay`` and
  ``time_first`` stay whole (RWKV's weight initialisation mixes them with plain tensors) and each rank
  uses its slice; the model allocates its recurrent state at full width from the config, and each rank
  keeps its channels in the first ``channels / tp`` entries.
- ``hf_neuron.alibi_heads_batch_major`` / ``hf_neuron.alibi_heads_first``: on an attention module
  whose heads are sharded, the ALiBi bias the model builds once for all heads (BLOOM passes
  ``alibi`` as ``[batch * heads, 1, keys]``, MPT ``position_bias`` as ``[heads, 1, keys]``) is cut to
  the rank's heads before the attention runs.
"""

from __future__ import annotations

import contextlib

import torch


def _mesh_rank_size(mesh) -> tuple[int, int]:
    return mesh.get_local_rank(), mesh.size()


def _tp_group(mesh):
    return mesh.get_group() if mesh.ndim == 1 else mesh.get_group("tp")


def _all_reduce_sum(tensor: torch.Tensor, mesh) -> torch.Tensor:
    """Sum over the TP ranks; differentiable (the gradient of a sum is the sum of the gradients)."""
    from torch.distributed.nn.functional import all_reduce

    return all_reduce(tensor, group=_tp_group(mesh))


def _replicated_input(x):
    from torch.distributed.tensor import DTensor, Replicate

    if isinstance(x, DTensor):
        if x.placements != (Replicate(),):
            x = x.redistribute(placements=[Replicate()])
        return x.to_local()
    return x


def _local(tensor):
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


@contextlib.contextmanager
def _local_parameters(module: torch.nn.Module):
    """Every DTensor parameter of ``module`` and its descendants replaced by its local shard meanwhile."""
    from torch.distributed.tensor import DTensor

    swapped = []
    for owner in module.modules():
        for name, param in list(owner._parameters.items()):
            if isinstance(param, DTensor):
                owner._parameters[name] = param.to_local()
                swapped.append((owner, name, param))
    try:
        yield
    finally:
        for owner, name, param in swapped:
            owner._parameters[name] = param


def build_styles() -> dict:
    """The styles by registry name (imports Transformers' TP module, so called only when registering)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard
    from transformers.distributed.tensor_parallel import TensorParallelLayer

    def _distribute(module, param: str, mesh, placement) -> None:
        meta = module._parameters.get(param)
        if meta is None:
            return
        module._parameters[param] = torch.nn.Parameter(
            distribute_tensor(meta, mesh, [placement], src_data_rank=None), requires_grad=meta.requires_grad
        )

    class Colwise(TensorParallelLayer):
        """Output features sharded; ``pieces`` > 1: the output is that many equal pieces, each sharded."""

        def __init__(self, weight_out_dim: int, pieces: int = 1):
            self.weight_out_dim, self.pieces = weight_out_dim, pieces

        def _placement(self, dim: int):
            return Shard(dim) if self.pieces == 1 else _StridedShard(dim=dim, split_factor=self.pieces)

        def shard_param(self, module, param, mesh, **upstream_keywords):
            _distribute(module, param, mesh, self._placement(0 if param == "bias" else self.weight_out_dim))

        def install_forward(self, module, mesh, **upstream_keywords):
            def forward(x):
                x = _replicated_input(x)
                weight, bias = _local(module._parameters["weight"]), module._parameters.get("bias")
                out = x @ (weight if self.weight_out_dim == 1 else weight.t())
                return out if bias is None else out + _local(bias)

            module.forward = forward
            return module

    class Rowwise(TensorParallelLayer):
        """Input features sharded; the partial outputs are summed over the ranks, then the bias is added."""

        def __init__(self, weight_in_dim: int):
            self.weight_in_dim = weight_in_dim

        def shard_param(self, module, param, mesh, **upstream_keywords):
            _distribute(module, param, mesh, Replicate() if param == "bias" else Shard(self.weight_in_dim))

        def install_forward(self, module, mesh, **upstream_keywords):
            def forward(x):
                bias = module._parameters.get("bias")
                weight = _local(module._parameters["weight"])
                partial = x @ (weight if self.weight_in_dim == 0 else weight.t())
                out = _all_reduce_sum(partial, mesh)
                return out if bias is None else out + _local(bias)

            module.forward = forward
            return module

    class QueryColwiseKvReplicated(TensorParallelLayer):
        """Fused ``[queries | key | value]`` with one key/value head: whole weight, local query rows."""

        def install_forward(self, module, mesh, **upstream_keywords):
            rank, size = _mesh_rank_size(mesh)
            queries = module.in_features  # hidden size = query heads x head dim
            if queries % size:
                raise ValueError(f"{queries} query features do not split over {size} tensor-parallel ranks")
            share = queries // size

            def forward(x):
                x = _replicated_input(x)
                weight, bias = module.weight, module.bias
                query = torch.nn.functional.linear(
                    x, weight[rank * share:(rank + 1) * share], None if bias is None else bias[rank * share:(rank + 1) * share]
                )
                key_value = torch.nn.functional.linear(x, weight[queries:], None if bias is None else bias[queries:])
                return torch.cat([query, key_value], dim=-1)

            module.forward = forward
            return module

    class ShardedRMSNorm(TensorParallelLayer):
        def shard_param(self, module, param, mesh, **upstream_keywords):
            _distribute(module, param, mesh, Shard(0))

        def install_forward(self, module, mesh, **upstream_keywords):
            eps = getattr(module, "variance_epsilon", None) or getattr(module, "eps", None) or 1e-6
            full = module.weight.shape[0]

            def forward(hidden_states):
                dtype = hidden_states.dtype
                squares = _all_reduce_sum(hidden_states.to(torch.float32).pow(2).sum(-1, keepdim=True), mesh)
                normed = hidden_states.to(torch.float32) * torch.rsqrt(squares / full + eps)
                return _local(module.weight) * normed.to(dtype)

            module.forward = forward
            return module

    class AlibiHeads(TensorParallelLayer):
        """Cut the all-heads ALiBi keyword argument ``name`` to this rank's heads."""

        def __init__(self, name: str, batch_major: bool):
            self.name, self.batch_major = name, batch_major

        def transform_inputs_pre_forward(self, module, args, kwargs, mesh, **upstream_keywords):
            bias = kwargs.get(self.name)
            if bias is None:
                return args, kwargs
            rank, size = _mesh_rank_size(mesh)
            if self.batch_major:  # [batch * heads, 1, keys]
                batch = args[0].shape[0]
                heads = bias.shape[0] // batch
                share = heads // size
                bias = bias.view(batch, heads, *bias.shape[1:])[:, rank * share:(rank + 1) * share]
                bias = bias.reshape(batch * share, *bias.shape[2:])
            else:  # [heads, 1, keys]
                share = bias.shape[0] // size
                bias = bias[rank * share:(rank + 1) * share]
            return args, {**kwargs, self.name: bias}

    class Shard0(TensorParallelLayer):
        def shard_param(self, module, param, mesh, **upstream_keywords):
            _distribute(module, param, mesh, Shard(0))

        def install_forward(self, module, mesh, **upstream_keywords):
            return module  # read by the enclosing mixer, under its local-parameter context

    class MixerLocal(Shard0):
        def install_forward(self, module, mesh, **upstream_keywords):
            original = module.forward

            def forward(*args, **kwargs):
                with _local_parameters(module):
                    return original(*args, **kwargs)

            module.forward = forward
            return module

    class RwkvAttention(TensorParallelLayer):
        def install_forward(self, module, mesh, **upstream_keywords):
            original = module.forward
            rank, size = _mesh_rank_size(mesh)

            def forward(hidden, state=None, use_cache=False):
                whole = {name: module._parameters[name] for name in ("time_decay", "time_first")}
                channels = whole["time_decay"].shape[0] // size
                local_state = state
                if state is not None:  # views: the mixer's writes land in the model's state
                    local_state = list(state[:2]) + [s.narrow(1, 0, channels) for s in state[2:]]
                try:
                    for name, param in whole.items():
                        module._parameters[name] = param.narrow(0, rank * channels, channels)
                    with _local_parameters(module):
                        out, _ = original(hidden, state=local_state, use_cache=use_cache)
                finally:
                    module._parameters.update(whole)
                return out, state

            module.forward = forward
            return module

    return {
        "hf_neuron.conv1d_colwise": Colwise(weight_out_dim=1),
        "hf_neuron.conv1d_packed3_colwise": Colwise(weight_out_dim=1, pieces=3),
        "hf_neuron.conv1d_rowwise": Rowwise(weight_in_dim=0),
        "hf_neuron.packed2_colwise": Colwise(weight_out_dim=0, pieces=2),
        "hf_neuron.packed3_colwise": Colwise(weight_out_dim=0, pieces=3),
        "hf_neuron.shard0": Shard0(),
        "hf_neuron.mixer_local": MixerLocal(),
        "hf_neuron.rwkv_attention": RwkvAttention(),
        "hf_neuron.query_colwise_kv_replicated": QueryColwiseKvReplicated(),
        "hf_neuron.sharded_rmsnorm": ShardedRMSNorm(),
        "hf_neuron.alibi_heads_batch_major": AlibiHeads("alibi", batch_major=True),
        "hf_neuron.alibi_heads_first": AlibiHeads("position_bias", batch_major=False),
    }

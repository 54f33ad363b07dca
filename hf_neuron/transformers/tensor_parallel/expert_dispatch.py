"""Expert-parallel token dispatch whose shapes and collectives never depend on the routing.

Transformers reaches the experts of an expert-parallel (EP) layer through an ``EPImplementation`` named by
``DistributedConfig.ep_implementation`` (``transformers.distributed.expert_parallel``). Its default,
``"auto"``, runs ``"all_reduce"`` at inference and ``"all_to_all"`` once gradients flow. That all-to-all
sends each rank the tokens routed to its experts: the split sizes are counted from the routing, read back
to the host and passed to an all-to-all with uneven splits. TorchNeuron's collectives take even splits
only, and a compiled graph cannot have a size that follows the routing, so an MoE training step under EP
fails on Neuron.

Two implementations here have static shapes, registered beside upstream's:

- :class:`PaddedAllToAllEP` (``"neuron_padded_all_to_all"``): every rank sends every other rank a chunk
  of fixed capacity, room for all of its (token, expert) routes, empty slots marked as upstream's EP
  sentinels (skipped by the experts, weighed zero). Even splits whatever the routing, and no token is ever
  dropped, so it computes what the unsharded layer computes. It works wherever the ranks of the EP group
  hold different batches (EP across FSDP ranks).
- :class:`StaticEP` (``"neuron_static"``): upstream's ``"all_reduce"`` where the EP group shares one batch
  (the EP group is the TP group) and :class:`PaddedAllToAllEP` elsewhere. hf_neuron's default on Neuron:
  ``benchmarks/moe_dispatch.py`` measures both side by side (collective bytes per token, peak memory,
  graphs). At TP=EP=2 on 64 tokens, forward and backward of one layer, per rank: the all-reduce hands
  2.0 hidden vectors per token to collectives, the padded all-to-all 15.1 (its chunks have room for every
  route of every token, most of them empty) with a 46% higher peak; one graph each. Where the batch is
  shared, the all-reduce wins; where it is not, only the padded all-to-all applies.
"""

from __future__ import annotations

import torch

#: ``DistributedConfig.ep_implementation`` names of the implementations below.
PADDED_ALL_TO_ALL = "neuron_padded_all_to_all"
STATIC = "neuron_static"


def _tp_rows(tensors, tp_mesh, rows: int):
    """This TP rank's slice of rows the TP group shares (padded to a multiple of the group size), as
    upstream's all-to-all takes it: a local chunk whose backward gathers the row gradients."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    size = tp_mesh.size()
    padding = -rows % size
    sliced = []
    for tensor in tensors:
        if padding:
            tensor = torch.nn.functional.pad(tensor, (0, 0, 0, padding))
        sliced.append(DTensor.from_local(tensor, tp_mesh, [Replicate()], run_check=False)
                      .redistribute(tp_mesh, [Shard(0)]).to_local())
    return sliced, rows + padding


def _tp_gather(output, tp_mesh, padded_rows: int, rows: int):
    from torch.distributed.tensor import DTensor, Shard

    hidden = output.shape[-1]
    full = DTensor.from_local(output.contiguous(), tp_mesh, [Shard(0)], shape=(padded_rows, hidden),
                              stride=(hidden, 1)).full_tensor()
    return full[:rows]


def _exchange(tensor, group):
    """An all-to-all of equal chunks (dimension 0 split evenly over the group), differentiable."""
    from torch.distributed import _functional_collectives as funcol

    return funcol.wait_tensor(funcol.all_to_all_single_autograd(tensor, None, None, group))


def build_implementations():
    """The two implementation classes (they subclass upstream's ``EPImplementation``, imported here)."""
    from transformers.distributed.expert_parallel import AllReduceEP, EPImplementation

    class PaddedAllToAllEP(EPImplementation):
        """Each rank sends each EP rank a chunk of ``rows * k`` slots, the most its routes can fill.

        A route (token ``t``, slot ``j``) to expert ``e`` goes to rank ``e // local`` at the next free slot
        of that rank's chunk (a running count per destination); unused slots carry the sentinel expert id
        ``local`` and weight 0. Both exchanges have equal splits; the outputs come back to the same slots,
        are read per route, weighted and summed per token.
        """

        def __call__(self, hidden_states, top_k_index, top_k_weights):
            rows, tp_mesh = hidden_states.shape[0], self.tp_mesh
            padded_rows = rows
            if tp_mesh.size() > 1:
                (hidden_states, top_k_index, top_k_weights), padded_rows = _tp_rows(
                    (hidden_states, top_k_index, top_k_weights), tp_mesh, rows)
            group, ranks, local = self.ep_mesh.get_group(), self.ep_mesh.size(), self.num_local_experts
            slots_per_route = top_k_index.shape[-1]
            routes = top_k_index.reshape(-1)
            capacity = routes.shape[0]  # every route of this rank could go to one rank: none is dropped
            owner = torch.div(routes, local, rounding_mode="floor")
            to_owner = torch.nn.functional.one_hot(owner, ranks)
            slot = ((to_owner.cumsum(0) - 1) * to_owner).sum(-1)
            position = owner * capacity + slot

            hidden = hidden_states.shape[-1]
            send = hidden_states.new_zeros(ranks * capacity, hidden).index_copy(
                0, position, hidden_states.repeat_interleave(slots_per_route, dim=0))
            send_ids = routes.new_full((ranks * capacity,), local).index_copy(0, position, routes % local)
            received = _exchange(send, group)
            received_ids = _exchange(send_ids, group).unsqueeze(-1)
            weights = (received_ids < local).to(received.dtype)
            computed = self.experts_forward(received, received_ids, weights)
            returned = _exchange(computed, group).index_select(0, position)
            output = (returned.view(-1, slots_per_route, hidden) * top_k_weights.unsqueeze(-1)).sum(dim=1)
            if tp_mesh.size() > 1:
                output = _tp_gather(output, tp_mesh, padded_rows, rows)
            return output

    class StaticEP(EPImplementation):
        """Upstream's all-reduce where the EP group shares one batch, the padded all-to-all elsewhere."""

        def __init__(self, experts, ep_mesh, tp_mesh):
            super().__init__(experts, ep_mesh, tp_mesh)
            chosen = AllReduceEP if self.shares_batch else PaddedAllToAllEP
            self.chosen = chosen(experts, ep_mesh, tp_mesh)

        def __call__(self, hidden_states, top_k_index, top_k_weights):
            return self.chosen(hidden_states, top_k_index, top_k_weights)

    return {PADDED_ALL_TO_ALL: PaddedAllToAllEP, STATIC: StaticEP}


__all__ = ["PADDED_ALL_TO_ALL", "STATIC", "build_implementations"]

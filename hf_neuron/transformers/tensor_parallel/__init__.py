"""Tensor parallelism on Neuron (``from_pretrained(distributed_config=DistributedConfig(tp_size=N))``).

- :mod:`.plan_support`: hf_neuron's plans installed for architectures upstream ships without one, the
  styles and per-rank sizes they need, and head-count constraints checked before anything is sharded.
- :mod:`.plans`, :mod:`.styles`: those plans (one per ``model_type``) and parallel styles.
- :mod:`.embeddings`: token embeddings sharded only where it compiles and computes the same.
- :mod:`.fused_tensors`: a checkpoint tensor that fuses several projections is read per part.
- :mod:`.experts`: routed experts sharded over the tensor-parallel group through upstream's expert
  parallelism, a dispatch whose shapes do not depend on the routing, and ``ep_size`` checked early.
- :mod:`.expert_dispatch`: those dispatch implementations (all-reduce within a TP group, an all-to-all
  padded to a fixed capacity across ranks that hold different batches).
"""

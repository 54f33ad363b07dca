"""Fixes that exist for one architecture, one module per ``model_type`` (as ``transformers/models/<model_type>/``).

A user of Mamba opens :mod:`.mamba`; each module says what upstream gap of that architecture it fills.
A mechanism shared by several of these modules sits beside them with a leading underscore
(:mod:`._static_experts` for DBRX and LongCat-Flash, :mod:`._placeholder_ids` for Kimi-K2.5 and Muse
Glimmer). Fixes that serve many architectures live with their capability (``generation``,
``tensor_parallel``, ``training``, ``loading``).
"""

"""The tree policy, torch-free: what tree to grow, and the settings of every decoder.

The bottom layer: the standard library and numpy only (the ``torch-free`` import-linter contract
forbids torch and transformers here, even indirectly). Modules: ``growth_rule`` (:class:`GrowthRule`,
the one policy every decoder lowers to), ``configs`` and ``dynatree_config`` (the decoders' configs),
``config`` (method name -> config), ``tree`` (:class:`DraftTree` as plain data), ``growth``
(:func:`grow_tree`, the reference growth, and the cost-aware :class:`CostState`), ``tail`` (the
prompt-lookup tail), ``replay`` (recorded trees under another rule), ``history`` (the adapter of D0
and τ_h), ``cost_model`` (the verify-cost curve c(n)), ``sequoia`` (Sequoia's dynamic program),
``sampling`` (speculative sampling's settings and numpy reference), ``lookup`` (prompt lookup's
settings), ``masks`` (a tree's boolean visibility), ``checks`` (argument checks naming the range).
"""

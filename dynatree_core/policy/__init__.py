"""The tree policy, torch-free: what tree to grow, and the settings of every decoder.

Bottom layer: imports only the standard library, numpy and :mod:`dynatree_core.paths` /
:mod:`dynatree_core.version` (the ``torch-free`` import-linter contract forbids torch and
transformers here, even indirectly). Modules: ``checks`` (argument checks naming the parameter and
its range), ``growth_rule`` (:class:`GrowthRule`, the one policy every decoder lowers to),
``configs`` and ``dynatree_config`` (the decoders' configs), ``config`` (the registry by method
name), ``tree`` (:class:`DraftTree` as plain data), ``growth`` (:func:`grow_tree`, the reference
growth, and the cost-aware :class:`CostState`), ``tail`` (the prompt-lookup tail), ``replay``
(re-growing recorded trees under another rule), ``history`` (the sliding-window adapter of D0 and
τ_h), ``cost_model`` (the verify-cost curve c(n)), ``sequoia`` (Sequoia's dynamic program),
``lookup`` (prompt lookup's settings), ``masks`` (boolean visibility of a tree).
"""

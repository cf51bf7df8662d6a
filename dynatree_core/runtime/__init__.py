"""Tensors on the model's device: the target's forwards (one backend per run, eager or static), masks
and positions, KV caches and their committed/dead bookkeeping, the device tree, speculative
sampling's device side, n-gram matching, linear kernels, compilation, and the host syncs.

Imports :mod:`dynatree_core.policy` (the rule a device tree executes) and torch/transformers; never
a drafter, a pair or the engine (drafters implement :class:`~dynatree_core.runtime.device_tree.Proposer`
instead). How a tree grows is the policy's business. This ``__init__`` stays empty so that
:mod:`dynatree_core.runtime.choices` loads without torch.
"""

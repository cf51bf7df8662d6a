"""Tensors on the model's device: forwards, masks and positions, KV caches, the device tree,
n-gram matching, linear kernels and the host syncs between host and device.

Imports :mod:`dynatree_core.policy` (the rule a device tree executes) and torch/transformers; never
a drafter, a pair or the engine (drafters implement :class:`~dynatree_core.runtime.device_tree.Proposer`
instead). Model plumbing only: how a tree grows is the policy's business. This ``__init__`` stays
empty so that :mod:`dynatree_core.runtime.choices` loads without torch.
"""

"""Tensors on the model's device: the target's forwards (one backend per run, eager or static), masks
and positions, KV caches and their committed/dead bookkeeping, the device tree, speculative
sampling's device side, n-gram matching, linear kernels, compilation, and the host syncs.

Four rooms: :mod:`~dynatree_core.runtime.tree` (the device tree), :mod:`~dynatree_core.runtime.static`
(the fast path's static shapes and compiled regions), :mod:`~dynatree_core.runtime.cache` (the KV
caches) and :mod:`~dynatree_core.runtime.model` (masks, positions, forwards, linear kernels); each
imports only the ones below it (model < cache < static < tree < backend: the runtime-rooms
contract). The backend, the host syncs, n-gram matching, sampling and the torch-free choices stay here.

Imports :mod:`dynatree_core.policy` (the rule a device tree executes) and torch/transformers; never
a drafter, a pair or the engine (drafters implement :class:`~dynatree_core.runtime.tree.tree.Proposer`
instead). How a tree grows is the policy's business. This ``__init__`` stays empty so that
:mod:`dynatree_core.runtime.choices` loads without torch.
"""

"""What the engine feeds a model and how: masks, positions and forwards, with no cache policy and no tree.

:mod:`.forwards` builds float additive masks and position ids and runs the forwards, :mod:`.compat`
smooths over transformers versions, and :mod:`.linear_kernels` picks the linear layers' kernels.
Imports nothing else of the runtime but the host syncs and the choices: the bottom room.
"""

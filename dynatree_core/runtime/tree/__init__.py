"""The device tree: a draft tree grown on the model's device by the policy's rule.

:mod:`.tree` holds :class:`~dynatree_core.runtime.tree.tree.DeviceTree` (and the ``Proposer`` a drafter
implements); one level step (:mod:`.level_step`) shared by every policy, the cost-aware growth
(:mod:`.cost`), the rerank (:mod:`.rerank`), the lookup tail (:mod:`.tail`), the stop and prune codes
(:mod:`.codes`), a lent level run as one compiled call (:mod:`.phase`) and the host copy (:mod:`.to_host`).
"""

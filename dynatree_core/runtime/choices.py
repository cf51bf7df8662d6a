"""Names of the runtime's choices, torch-free (the command line lists them without importing torch)."""

#: what the models' linear layers may run on (:mod:`dynatree_core.runtime.model.linear_kernels`): ``auto``
#: (oneDNN where it applies: a CPU model in float32, not split across devices), ``onednn`` (weights
#: prepacked for oneDNN), ``torch``
LINEAR_KERNELS = ("auto", "onednn", "torch")

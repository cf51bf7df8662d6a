"""The target/draft pair: :class:`~dynatree_core.pairs.pair.ModelPair` with its checks, a pair by
name (``named``: ``ModelPair.named("default")``), device and dtype options (``devices``), loading from
the hub or a path (``loading``), the embedded offline default pair (``default_pair``), tiny random
pairs for tests and demos (``tiny``, built from ``tiny_models``), and the names the CLI lists
(``choices``, torch-free).

Imports the drafters (a pair knows which drafter its draft gets), the runtime and the policy; never
the engine, the benchmark or distillation. This ``__init__`` stays empty so that
:mod:`dynatree_core.pairs.choices` loads without torch.
"""

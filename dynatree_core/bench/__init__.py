"""Benchmark harness: the paper's protocol, tables and sweeps (see ``dynatree bench``).

* :mod:`.data`, :mod:`.everyday`  evaluation text (WikiText-2, PG-19, everyday prompts) and seeded
  prompt selection with provenance;
* :mod:`.methods`, :mod:`.hf_assisted`  method specs, and HF's assisted generation measured like the engine;
* :mod:`.pairs`  the pair as a recipe a worker can load (``ModelPair.named``);
* :mod:`.protocol`, :mod:`.shards`  the measurement loop (T tokens, EOS ignored, W warmup prompts,
  history carry) and its cut into independent shards;
* :mod:`.runner`, :mod:`.execution`, :mod:`.ray_backend`, :mod:`.checkpoint`  one runner for
  benchmarks and sweeps: shards run in this process or on Ray workers, checkpointed as they finish;
* :mod:`.results`, :mod:`.tables`, :mod:`.sweeps`  aggregation and result files, Tables 1-6, the sweeps;
* :mod:`.device_check`  the device check's sections (``scripts/gpu_check.py`` is its entry point).

Imports the engine, pairs, drafters, runtime, records and policy; independent of
:mod:`dynatree_core.distill`; the CLI builds on it.
"""

"""Benchmark harness: the paper's protocol, tables and sweeps (see ``dynatree bench``).

Modules, one job each:

* :mod:`.data`     evaluation text (WikiText-2, PG-19; local, HF ``datasets`` or bundled) and
  seeded prompt selection (N prompts of L_max tokens, with provenance);
* :mod:`.methods`  method specs (AR, linear K, fixed tree D/B/τ, DynaTree and its ablations);
* :mod:`.hf_assisted` Hugging Face's assisted generation as a method, measured like the engine
  (engine overhead per iteration, for comparison);
* :mod:`.protocol` the measurement loop (T tokens, EOS ignored, W warmup prompts, history carry);
* :mod:`.runner`   one runner for benchmarks and sweeps, producing the result document;
* :mod:`.results`  aggregation (mean/std over N − W prompts, speedup = TPS / TPS_AR), provenance,
  atomic no-overwrite JSON files;
* :mod:`.tables`   Tables 1-5 as DataFrames and Markdown;
* :mod:`.sweeps`   fixed-tree grid, DynaTree sensitivity, T and L_max scaling (their figures:
  :mod:`dynatree_viz.sweeps`);
* :mod:`.device_check` the one device check's sections (``scripts/gpu_check.py`` is its entry point).

Imports the engine, pairs, drafters, runtime, records and policy; independent of
:mod:`dynatree_core.distill` (neither imports the other); the views and the CLI build on it.
"""

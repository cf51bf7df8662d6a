"""The device check (``scripts/gpu_check.py``): one run, sized to a few minutes on one GPU, that records
exactness on the device, low-precision drift, the benchmark on every runtime and the fast path's
verify-cost curve in one JSON document, a failing section recorded and the next one run.

* :mod:`.harness`     the budget, the report rewritten after every section, sections, the watchdog;
* :mod:`.environment` the device, versions and TF32 settings;
* :mod:`.exactness`   the exactness tests in a pytest subprocess on the device;
* :mod:`.precision`   fp32 / fp16 / bf16 AR and DynaTree token by token, logit margins where they differ;
* :mod:`.bench`       the benchmark on every runtime, the CUDA host-sync audit;
* :mod:`.fastpath`    the fast path's c(n) per runtime (:func:`~dynatree_core.engine.calibrate.fast_verify_curve`);
* :mod:`.summary`     the verdict and the text summary.
"""

"""Prefill and 8 steps timed apart, static loop vs dynamic loop, on the default target at batch 64 (the bench's
prompts), twice. Run from the repository root: python docs/bench/2026-11-28-teacher-data/split_prefill_steps.py"""
import time, torch, sys
sys.path.insert(0, "docs/bench/2026-11-28-teacher-data")
from bench_teacher_data import prompts
from dynatree_core.pairs.default_pair import load_target
from dynatree_core.distill.static_decode import StaticWriter
from dynatree_core.distill.decode import _decode_batch
torch.set_num_threads(2)
target, tok = load_target(dtype=torch.float32)
b = prompts(tok, 64, 0)
with torch.no_grad():
    for _ in range(2):
        w = StaticWriter(target, b, 32, set(), False, 1.0, 1.0)
        t0 = time.perf_counter(); w.prefill(); t1 = time.perf_counter()
        for _ in range(8): w.step()
        t2 = time.perf_counter()
        print(f"static prefill {t1-t0:.2f}s, 8 steps {t2-t1:.2f}s", flush=True)
        t0 = time.perf_counter(); _decode_batch(target, b, 1, set(), False, 1.0, 1.0); t1 = time.perf_counter()
        _decode_batch(target, b, 9, set(), False, 1.0, 1.0); t2 = time.perf_counter()
        print(f"dynamic prefill {t1-t0:.2f}s, prefill+8 steps {t2-t1:.2f}s", flush=True)

"""The dynamic loop's steps profiled at batch 64 on the default target: (prefill + 8 steps) minus (prefill),
per step. Run from the repository root."""
import time, torch, sys
sys.path.insert(0, "docs/bench/2026-11-28-teacher-data")
from bench_teacher_data import prompts
from dynatree_core.pairs.default_pair import load_target
from dynatree_core.distill.decode import _decode_batch
torch.set_num_threads(2)
target, tok = load_target(dtype=torch.float32)
b = prompts(tok, 64, 0)
from torch.profiler import profile, ProfilerActivity
with torch.no_grad():
    _decode_batch(target, b, 2, set(), False, 1.0, 1.0)
    tabs=[]
    for n in (1, 9):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0=time.perf_counter(); _decode_batch(target, b, n, set(), False, 1.0, 1.0); print(n, time.perf_counter()-t0)
        tabs.append({e.key:(e.self_cpu_time_total, e.count) for e in prof.key_averages()})
    d={k:(tabs[1][k][0]-tabs[0].get(k,(0,0))[0])/8/1000 for k in tabs[1]}
    for k,v in sorted(d.items(), key=lambda x:-x[1])[:12]: print(f"{k:60s} {v:8.2f} ms/step")

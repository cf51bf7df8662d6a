"""One static step profiled (torch.profiler, 3 steps after the prefill and one step) at batch 64 on the default
target, before the prefix view (every step read all L = 128 slots). Run from the repository root at commit 75facd3."""
import time, torch, sys
sys.path.insert(0, "docs/bench/2026-11-28-teacher-data")
from bench_teacher_data import prompts
from dynatree_core.pairs.default_pair import load_target
from dynatree_core.distill.static_decode import StaticWriter
torch.set_num_threads(2)
target, tok = load_target(dtype=torch.float32)
b = prompts(tok, 64, 0)
print("P", max(map(len, b)), "min", min(map(len,b)))
with torch.no_grad():
    w = StaticWriter(target, b, 32, set(), False, 1.0, 1.0)
    w.prefill()
    w.step()
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3): w.step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))

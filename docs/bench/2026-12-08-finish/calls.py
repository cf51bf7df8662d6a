"""Calls and host seconds of one batched AR run and one always-sat-out budget run (B = 8, prompts, T = 64)."""
import cProfile, io, os, pstats, sys, time
sys.argv = [sys.argv[0], "prompts", "8", "0"]
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "satout.py")).read().split("one(\"ar\", 8); one(\"sat\", 8)")[0])
one("ar", 8); one("sat", 8)
for kind in ("ar", "sat", "ar", "sat"):
    pr = cProfile.Profile()
    pr.enable(); t0 = time.perf_counter(); pre, dec = one(kind); wall = time.perf_counter() - t0; pr.disable()
    st = pstats.Stats(pr)
    calls = st.total_calls
    # seconds inside the models' forward (torch modules) vs elsewhere
    fwd = sum(v[3] for k, v in st.stats.items() if k[2] == "_wrapped_call_impl")
    print(f"{kind}: wall {wall:.2f}s decode {dec:.2f}s calls {calls}  module-call cum {fwd:.2f}s")
    if kind == "sat":
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); last = s.getvalue()
print(last[:6000])

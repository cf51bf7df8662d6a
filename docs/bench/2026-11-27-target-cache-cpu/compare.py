import json, sys, statistics as st
def load(p):
    d=json.load(open(p)); return {(a['dataset'],a['label']):a for a in d['aggregates']}, d
for pair in [("old","new"),("old2","new2")]:
    try: A,da=load(f"docs/bench/2026-11-27-target-cache-cpu/{pair[0]}.json"); B,db=load(f"/tmp/ab/{pair[1]}.json")
    except FileNotFoundError: continue
    for k in sorted(A):
        a,b=A[k],B[k]
        print(pair, k, f"old {a['tokens_per_s']:.2f} ({a['tokens_per_s']/A[(k[0],'ar')]['tokens_per_s']:.2f}x)  new {b['tokens_per_s']:.2f} ({b['tokens_per_s']/B[(k[0],'ar')]['tokens_per_s']:.2f}x)  L {a['tokens_per_iteration']:.2f}/{b['tokens_per_iteration']:.2f}")
    print(da['checks']['outputs_identical_across_methods'], db['checks']['outputs_identical_across_methods'])

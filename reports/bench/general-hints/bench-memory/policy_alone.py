"""Policy alone (the doppler placer's own rollouts) of each shipped general checkpoint on bench
memory's memory-bound cases, against the best of m-ETF, m-SCT, pipeline."""
import json, sys, time
from doppler_lab.lab.bench.memory_bound import CASES, PlacerRun, compare_placers, make_placers, best_baseline, no_worse
ckpts = ["doppler/general", "doppler/general-hint", "doppler/general-hints"]
runs = [PlacerRun("m-etf", "etf"), PlacerRun("m-sct", "m-sct"), PlacerRun("pipeline", "pipeline")]
runs += [PlacerRun(c, "doppler", {"checkpoint": c}) for c in ckpts]
placers = make_placers(runs)
out = []
for case in CASES:
    t0 = time.time()
    g, cl = case.build()
    rows, _ = compare_placers(g, cl, runs, placers)
    by = {r["placer"]: r for r in rows}
    best = best_baseline(rows)
    rec = {"case": case.name, "best": best}
    for c in ckpts:
        r = by[c]
        rec[c] = {"doppler_s": r["makespan_s"], "fits": r["fits"], "source": r.get("source"),
                  "policy_s": r.get("policy_s"), "policy_no_worse": no_worse(r.get("policy_s"), best),
                  "policy_vs_best": None if r.get("policy_s") is None or not best else r["policy_s"] / best[1] - 1}
    out.append(rec)
    print(json.dumps(rec), f"{time.time()-t0:.0f}s", flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)

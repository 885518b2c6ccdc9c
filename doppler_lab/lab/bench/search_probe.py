"""Probe of the DOPPLER budget search against ``local-search`` at equal simulator calls.

Run ``python -m doppler_lab.lab.bench.search_probe CHECKPOINT OUT.jsonl [--budgets 250 1000 2000]
[--seeds 0 1] [--strategies ils scan] [--groups generator cluster paper]``: one JSON
line per (task, seed, budget, method) with the makespan, the calls and the wall time (runs
already in ``OUT.jsonl`` are skipped), then Markdown tables of mean makespans relative to
``local-search`` on stdout: the summary, the budget curve and each task. Torch runs on one
thread.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from ...placers import place
from ...train.general_policy import held_out_tasks


def _runs(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def probe(
    checkpoint: str,
    out: Path,
    budgets: list[int],
    seeds: list[int],
    strategies: list[str],
    groups: list[str],
) -> list[dict]:
    """Measure every missing run into ``out`` (JSON lines) and return all runs."""

    done = {(r["task"], r["seed"], r["budget"], r["method"]) for r in _runs(out)}
    with out.open("a") as f:
        for task in held_out_tasks(groups):
            graph, cluster = task.build()
            for seed in seeds:
                for budget in budgets:
                    for method in ["local-search", *strategies]:
                        if (task.name, seed, budget, method) in done:
                            continue
                        opts = {"semantics": task.semantics, "budget": budget}
                        name = "local-search"
                        if method != "local-search":
                            name, opts["checkpoint"] = "doppler", checkpoint
                            strategy, _, share = method.partition("/")
                            opts["search"] = strategy
                            if share:  # "guided/10": samples = budget / 10 (at most 64)
                                opts["samples"] = min(budget // int(share), 64)
                        t0 = time.perf_counter()
                        p = place(name, graph, cluster, seed=seed, **opts)
                        wall = time.perf_counter() - t0
                        cost = p.meta.get("best_makespan", p.meta.get("best_cost"))
                        rec = {
                            "task": task.name,
                            "seed": seed,
                            "budget": budget,
                            "method": method,
                            "makespan": float(cost),
                            "rollout_makespan": p.meta.get("rollout_cost"),
                            "sim_calls": int(p.meta["sim_calls"]),
                            "wall_s": round(wall, 3),
                        }
                        f.write(json.dumps(rec) + "\n")
                        f.flush()
    return _runs(out)


def table(runs: list[dict]) -> str:
    """Markdown: per budget and method, the mean over tasks of (mean makespan over seeds) /
    (local-search's), its worst task, and wins / ties / losses against local-search."""
    mean: dict[tuple, list[float]] = defaultdict(list)
    for r in runs:
        mean[(r["task"], r["budget"], r["method"])].append(r["makespan"])
    methods = sorted({r["method"] for r in runs} - {"local-search"})
    lines = [
        "| budget | method | tasks | mean ratio to local-search | worst | wins / ties / losses |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for b in sorted({r["budget"] for r in runs}):
        for m in methods:
            ratios = []
            for (t, bb, mm), v in mean.items():
                if bb == b and mm == m and (t, b, "local-search") in mean:
                    ratios.append(np.mean(v) / np.mean(mean[(t, b, "local-search")]))
            if not ratios:
                continue
            r = np.array(ratios)
            wins, ties = int((r < 1 - 1e-6).sum()), int((abs(r - 1) <= 1e-6).sum())
            lines.append(
                f"| {b} | {m} | {r.size} | {r.mean():.4f} | {r.max():.4f} | "
                f"{wins} / {ties} / {r.size - wins - ties} |"
            )
    return "\n".join(lines)


def budget_curve(runs: list[dict]) -> str:
    """Markdown: per method and budget, the mean over tasks of its mean makespan relative to
    ``local-search`` at the largest budget (tasks measured at every budget by every method)."""
    mean: dict[tuple, list[float]] = defaultdict(list)
    for r in runs:
        mean[(r["task"], r["budget"], r["method"])].append(r["makespan"])
    budgets = sorted({r["budget"] for r in runs})
    methods = ["local-search", *sorted({r["method"] for r in runs} - {"local-search"})]
    tasks = [
        t
        for t in dict.fromkeys(r["task"] for r in runs)
        if all((t, b, m) in mean for b in budgets for m in methods)
    ]
    top = budgets[-1]
    lines = [
        f"| method | {' | '.join(str(b) for b in budgets)} |",
        f"|---|{'---:|' * len(budgets)}",
    ]
    for m in methods:
        cells = [
            np.mean(
                [np.mean(mean[(t, b, m)]) / np.mean(mean[(t, top, "local-search")]) for t in tasks]
            )
            for b in budgets
        ]
        lines.append(f"| {m} | {' | '.join(f'{c:.4f}' for c in cells)} |")
    return f"{len(tasks)} tasks\n\n" + "\n".join(lines)


def per_task(runs: list[dict]) -> str:
    """Markdown: per task, ``local-search``'s mean makespan at each budget and each method's
    as a ratio to it (the methods in the order of ``runs``)."""
    mean: dict[tuple, list[float]] = defaultdict(list)
    for r in runs:
        mean[(r["task"], r["budget"], r["method"])].append(r["makespan"])
    budgets = sorted({r["budget"] for r in runs})
    methods = [m for m in dict.fromkeys(r["method"] for r in runs) if m != "local-search"]
    cols = " / ".join(str(b) for b in budgets)
    lines = [
        f"| task | local-search {cols} | {' | '.join(f'{m} {cols}' for m in methods)} |",
        f"|---|---|{'---|' * len(methods)}",
    ]
    for t in dict.fromkeys(r["task"] for r in runs):
        ls = [np.mean(mean.get((t, b, "local-search"), [np.nan])) for b in budgets]
        cells = [" / ".join(f"{x:.4g}" for x in ls)]
        for m in methods:
            ratio = [np.mean(mean.get((t, b, m), [np.nan])) / x for b, x in zip(budgets, ls)]
            cells.append(" / ".join(f"{x:.3f}" for x in ratio))
        lines.append(f"| {t} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("out", type=Path)
    ap.add_argument("--budgets", type=int, nargs="+", default=[250, 1000, 2000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--strategies", nargs="+", default=["ils", "scan"])
    ap.add_argument("--groups", nargs="+", default=["generator", "cluster", "paper"])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    runs = probe(args.checkpoint, args.out, args.budgets, args.seeds, args.strategies, args.groups)
    print(table(runs))
    print()
    print(budget_curve(runs))
    print()
    print(per_task(runs))


if __name__ == "__main__":
    main()

"""How the shipped checkpoints in ``data/checkpoints/`` are trained (reproducible).

``python -m doppler_lab.train.shipped [--name llama_block ...] [--dest data/checkpoints]``
trains the DOPPLER dual policy (Stage I + Stage II) on each generated workload (p100x4, wc
semantics), writes ``<dest>/doppler/<workload>.pt`` and records in ``<dest>/index.json``: the
command, episodes, graph, cluster, seed, training time and the final metrics (the protocol's
makespan next to the Critical Path teacher's).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..house.atomic import atomic_copy, atomic_write
from ..house.codeversion import versioned_key
from ..house.jsonutil import write_json
from ..policies.policy_config import PLACED_NORMS, PolicyConfig

SHIPPED_WORKLOADS: tuple[str, ...] = ("chainmm", "ffnn", "llama_block", "llama_layer", "moe_layer")
SHIPPED_CLUSTER = "p100x4"
SHIPPED_SEMANTICS = "wc"
IMITATION_EPISODES = 400
SIM_EPISODES = 1600
DEFAULT_PLACED_NORM = PolicyConfig().placed_norm
#: Stages I and II as the shipped checkpoints were trained, before the presets' warm-ups and
#: Stage II's tempered losses: their recorded commands train them again
SHIPPED_IMITATION_SETTINGS: dict[str, Any] = {"lr_warmup": 0}
SHIPPED_SIM_SETTINGS: dict[str, Any] = {"tempered_loss": False, "lr_warmup": 0}


def train_shipped(
    name: str,
    dest: str | Path,
    work_dir: str | Path,
    seed: int = 0,
    imitation_episodes: int = IMITATION_EPISODES,
    sim_episodes: int = SIM_EPISODES,
    train_overrides: dict[str, Any] | None = None,
    placed_norm: str = DEFAULT_PLACED_NORM,
) -> dict[str, Any]:
    """Train the shipped checkpoint of workload ``name``; returns its index record."""
    import torch

    from ..placers import place
    from ..policies.policy_config import POLICY_PRESETS
    from ..search.learned import best_of_rollouts
    from ..timing.sim import Simulator
    from ..workloads.specs import cluster_from_spec, graph_from_spec
    from .pipeline import run_pipeline
    from .train_config import preset

    torch.set_num_threads(1)
    graph = graph_from_spec(name)
    cluster = cluster_from_spec(SHIPPED_CLUSTER)
    common = {"semantics": SHIPPED_SEMANTICS, "seed": seed}
    stages = [
        preset(
            "imitation", **{**SHIPPED_IMITATION_SETTINGS, **common}, episodes=imitation_episodes
        ),
        preset(
            "sim",
            **{
                **SHIPPED_SIM_SETTINGS,
                **common,
                **(train_overrides or {}),
                "episodes": sim_episodes,
            },
        ),
    ]
    # est estimate: the shipped checkpoints were trained with it (before wc had its own model),
    # so their recorded commands train them again
    pcfg = POLICY_PRESETS["default"].replace(placed_norm=placed_norm, estimate="est")
    # keyed by configuration and code version like every other run folder: other settings or
    # changed code train anew
    run_dir = Path(work_dir) / f"{name}-{versioned_key(pcfg, *stages)}"
    t0 = time.perf_counter()
    results = run_pipeline(stages, [graph], cluster, pcfg, run_dir, progress=False)
    train_s = time.perf_counter() - t0
    policy = results[-1].policy
    res = best_of_rollouts(policy, graph, cluster, 16, seed, SHIPPED_SEMANTICS)
    sim = Simulator(graph, cluster, SHIPPED_SEMANTICS)  # type: ignore[arg-type]
    cp = float(np.mean([sim.makespan(place("cp", graph, cluster, seed=s)) for s in range(5)]))
    out = Path(dest) / "doppler" / f"{name}.pt"
    atomic_copy(results[-1].checkpoint, out)  # type: ignore[arg-type]
    return {
        "command": f"python -m doppler_lab.train.shipped --name {name} --seed {seed}"
        + (f" --placed-norm {placed_norm}" if placed_norm != DEFAULT_PLACED_NORM else ""),
        "policy": "dual",
        "graph": name,
        "graph_nodes": graph.num_nodes,
        "cluster": SHIPPED_CLUSTER,
        "semantics": SHIPPED_SEMANTICS,
        "seed": seed,
        "episodes": {"imitation": imitation_episodes, "sim": sim_episodes},
        "train_config": stages[-1].to_dict(),
        "train_s": round(train_s, 1),
        "final": {
            "protocol_makespan_s": res.best_cost,
            "greedy_makespan_s": res.greedy_cost,
            "cp_mean_makespan_s": cp,
            "vs_cp": (cp - res.best_cost) / cp,
            "lower_bound_s": sim.lower_bound(),
        },
        "size_bytes": out.stat().st_size,
    }


def write_readme(dest: str | Path) -> Path:
    """Render ``<dest>/index.json`` as ``<dest>/README.md``."""
    from ..policies.checkpoint import read_checkpoint
    from ..viz.html import markdown_table

    dest = Path(dest)
    index = json.loads((dest / "index.json").read_text())["checkpoints"]
    lines = [
        "# Shipped policy checkpoints",
        "",
        "DOPPLER dual policies (the default policy config: layout doppler9, est estimate, width "
        "64, 4 message-passing steps; `placed norm` is how PLC normalises its placed-set sums, "
        "checkpoints written before that option read as `zscore`) trained per generated "
        "workload on `p100x4` with `wc` semantics: Stage I (imitation of the Critical Path "
        "teacher) then Stage II (REINFORCE in the simulator, the `sim` preset). Load one by name with "
        "`doppler_lab.policies.load_policy(resolve_checkpoint('doppler/llama_block'))`, "
        "`doppler-lab place llama_block --placer doppler --checkpoint doppler/llama_block`, or "
        "start training from it with `doppler-lab train --init doppler/llama_block ...`.",
        "",
        "Makespans in seconds (simulated, wc, no noise); `protocol` = best of the greedy rollout "
        "and 16 sampled rollouts; `cp` = the Critical Path teacher, mean over 5 tie seeds. "
        "`index.json` has the full record (training config, command, seed).",
        "",
    ]
    per_graph = {name: r for name, r in index.items() if "final" in r}
    general = {name: r for name, r in index.items() if "final" not in r}
    rows = []
    for name, r in sorted(per_graph.items()):
        f, e = r["final"], r["episodes"]
        cfg = read_checkpoint(dest / f"{name}.pt")["policy"]["config"]
        rows.append(
            {
                "checkpoint": name,
                "graph nodes": r["graph_nodes"],
                "episodes (I + II)": f"{e['imitation']} + {e['sim']}",
                "seed": r["seed"],
                "protocol": f"{f['protocol_makespan_s']:.4g}",
                "greedy": f"{f['greedy_makespan_s']:.4g}",
                "cp": f"{f['cp_mean_makespan_s']:.4g}",
                "vs cp": f"{f['vs_cp']:+.1%}",
                "lower bound": f"{f['lower_bound_s']:.4g}",
                "train s": f"{r['train_s']:.0f}",
                "size": f"{r['size_bytes'] / 1e6:.2f} MB",
                "placed norm": PolicyConfig.from_dict(dict(cfg)).placed_norm,
            }
        )
    lines += markdown_table(rows).splitlines()
    lines += ["", "Reproduce (one command per checkpoint, as recorded in `index.json`):", ""]
    lines += [f"- `{r['command']} --dest {dest}`" for _, r in sorted(per_graph.items())]
    for name, r in sorted(general.items()):
        e = r["episodes"]
        imit = r.get("train_config", {}).get("imitation", {})
        labels = ""
        if imit.get("plc_labels", "cp") == "cp-rollout":
            labels = (
                f" (PLC's labels: the rollout over deterministic CP, on "
                f"{imit.get('label_fraction', 1.0):g} of the visited states)"
            )
        elif imit.get("plc_labels", "cp") == "cluster":
            labels = " (PLC's labels: the device of the op's placed clustering mates, else CP's)"
        elif imit.get("plc_labels", "cp") == "clustering":
            labels = " (PLC's labels: the clustering placer's device of each op)"
        layout = r.get("policy_config", {}).get("layout", "doppler9")
        start = f", from `{r['init']}`" if r.get("init") else ""
        paper_costs = r.get("paper_cost_share", 0)
        pool = (
            f"; {paper_costs:g} of the generator tasks with the paper's cost convention"
            if paper_costs
            else ""
        )
        if r.get("memory_share"):
            pool += (
                f"; {r['memory_share']:g} of the tasks memory-bound (each device holding 1.25-2x "
                "the graph's tensors over the device count)"
            )
        if r.get("hints"):
            pool += (
                f"; each task once with the devices of each of {', '.join(r['hints'])} as a "
                "feature and once without, so that the policy also places without them "
                f"(`--hints {','.join(r['hints'])}`; the `doppler` placer draws a group of "
                "rollouts with each and one without)"
            )
        elif r.get("hint_free"):
            pool += (
                "; each task twice, with and without the clustering's devices as a feature, so "
                "that the policy also places without them (`--hint-free`; the `doppler` placer "
                "draws half its samples each way)"
            )
        if not any(e.values()) and r.get("init"):  # shipped as it was, placing otherwise
            hints = r.get("hints") or ["clustering"]
            lines += [
                "",
                f"## {name}: one policy for any graph and cluster",
                "",
                f"The weights of `{r['init']}`, unchanged (no episode), placing with the devices "
                f"of {' and of '.join(f'the {h} placer' for h in hints)} as hints: the `doppler` "
                f"placer draws a group of rollouts with each hint and one without (where a "
                "memory cap can bind, the partition's hint is left out), "
                f"{r['size_bytes'] / 1e6:.2f} MB. Not the default: `--placer doppler "
                f"--checkpoint {name}` uses it; `--placer doppler:hints={'+'.join(hints)}` "
                f"places so with any `doppler12` policy.",
                "",
                f"Reproduce: `{r['command']} --ship {dest}`.",
            ]
            continue
        lines += [
            "",
            f"## {name}: one policy for any graph and cluster",
            "",
            f"Trained on {r['tasks']} tasks (graphs with randomised generator parameters and "
            "scales, random DAGs; 2-8 devices on p100x4, v100x8, cpu and uniform clusters; paper "
            f"and wc semantics{pool}: `doppler_lab.train.general_policy`), feature layout {layout}"
            f"{start}, Stage I "
            f"{e.get('imitation', 0)}{labels} + imitation of searched placements "
            f"{e.get('anchor', 0)} + Stage II {e.get('sim', 0)} episodes, seed {r['seed']}, "
            f"{r['train_s']:.0f} s of updates on one core, {r['size_bytes'] / 1e6:.2f} MB. "
            + (
                "`--placer doppler` uses it when no `--checkpoint` is given, on any device count. "
                "How it does on held-out graphs and clusters: `doppler-lab bench general` "
                "(reports/bench/general.md)."
                if name == "doppler/general"
                else "`--placer doppler` without `--checkpoint` uses it where a memory cap can "
                "bind (the graph's tensors exceed the smallest device's memory); elsewhere "
                "`doppler/general`."
                if name == "doppler/general-memory"
                else f"Not the default: `--placer doppler --checkpoint {name}` uses it."
            ),
        ]
        if "validation_ratio_cp" in r:
            lines += [
                "",
                "On the validation pool (`doppler-lab train-general --score CKPT`: 32 tasks of the "
                "training distribution, best of greedy + 16 samples"
                + (
                    f", PLC sampling at temperature {r['sample_temperature']:g}"
                    if r.get("sample_temperature")
                    else ""
                )
                + f") it places at {r['validation_ratio_cp']} of CP's makespan (geometric mean); "
                "the seed was chosen on that score.",
            ]
        lines += [
            "",
            f"Reproduce: `{r['command']} --ship {dest}` (resumable: rerun the same command "
            "after an interruption).",
        ]
    lines.append("")
    path = dest / "README.md"
    atomic_write(path, "\n".join(lines))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", action="append", help="workloads (default: all)")
    p.add_argument("--dest", default="data/checkpoints")
    p.add_argument("--work-dir", default="runs/shipped")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--placed-norm",
        default=DEFAULT_PLACED_NORM,
        choices=PLACED_NORMS,
        help="PLC's placed-set normalisation (zscore: as checkpoints before the smooth one)",
    )
    args = p.parse_args(argv)
    dest = Path(args.dest)
    index_path = dest / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"checkpoints": {}}
    for name in args.name or SHIPPED_WORKLOADS:
        rec = train_shipped(name, dest, args.work_dir, args.seed, placed_norm=args.placed_norm)
        index["checkpoints"][f"doppler/{name}"] = rec
        write_json(index_path, index)
        print(f"doppler/{name}: {rec['final']}", file=sys.stderr)
    write_readme(dest)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

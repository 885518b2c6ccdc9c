"""The main job (``make demo`` / ``doppler-lab demo``): an end-to-end tour that writes
``reports/demo/index.html``.

Steps, each with progress shown: build the generated workloads; place each with the baseline
placers and simulate (wc semantics on 4 x P100); the paper's graphs under paper semantics when
they are present; a short DOPPLER fine-tuning from a shipped checkpoint and a comparison with its
teacher; a Hugging Face Llama imported through torch.export and placed; a real run on CPU
worker devices checked against the single-device reference. Steps whose pieces are not
installed are skipped with a note in the report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from ...hardware.cluster import make_cluster
from ...house.jsonutil import write_json
from ...house.paths import PAPER_GRAPHS_HINT, paper_graphs_dir
from ...ir.graph import DataflowGraph
from ...placers import available_placers, place
from ...timing.sim import Simulator
from ...viz import HtmlReport, bar_compare, compare_gantt, learning_curves
from ...workloads import build
from ...workloads.catalog import GENERATED_WORKLOADS, default_cluster, load_paper_graphs
from ...workloads.specs import graph_from_spec
from ..bench.importing import IMPORTED_POLICY, placer_comparison, simulated_traces
from ..bench.yardstick import best_known
from ..experiments import FINETUNE_RECIPE, executor_comparison, short_finetune

BASELINES: tuple[str, ...] = (
    "single", "round-robin", "random", "cp", "heft", "etf", "m-topo", "clustering",
)  # fmt: skip


@dataclass
class DemoContext:
    """What the steps share: options, the report being built, and a log of step timings."""

    out_dir: Path
    scale: float = 1.0
    seed: int = 0
    quick: bool = False
    paper_graphs: str | None = None
    progress: bool = True
    sections: list[tuple[str, Callable[[Any], None]]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def _placer_rows(
    name: str, graph: DataflowGraph, cluster, semantics: str, placers, seed: int
) -> tuple[list[dict], dict]:
    sim = Simulator(graph, cluster, semantics)
    lb = sim.lower_bound()
    rows, traces = [], {}
    for p in placers:
        if p not in available_placers():
            continue
        t0 = time.perf_counter()
        pl = place(p, graph, cluster, seed=seed)
        secs = time.perf_counter() - t0
        tr = sim.run(pl)
        traces[p] = tr
        rows.append(
            {
                "graph": name,
                "placer": p,
                "makespan": tr.makespan,
                "ratio_to_lower_bound": tr.makespan / lb,
                "placer_seconds": secs,
            }
        )
    return rows, traces


def step_baselines(ctx: DemoContext) -> None:
    """Every generated workload under the baseline placers, wc semantics on 4 x P100."""

    cluster = make_cluster("p100x4")
    rows: list[dict] = []
    keep: dict[str, Any] = {}
    for name in tqdm(
        GENERATED_WORKLOADS, desc="demo: baselines", leave=False, disable=not ctx.progress
    ):
        g = build(name, scale=ctx.scale)
        r, traces = _placer_rows(name, g, cluster, "wc", BASELINES, ctx.seed)
        rows += r
        if name == "llama_layer":
            keep = {"graph": g, "traces": traces}
    df = pd.DataFrame(rows)
    ctx.summary["baselines"] = df.to_dict(orient="records")

    def render(report) -> None:

        report.heading("Baseline placers on the generated workloads")
        report.text(
            "Each workload is placed by every baseline and simulated work-conservingly on 4 x P100 "
            "(PCIe, link contention, launch overhead). Ratio to the lower bound: 1.0 would be perfect."
        )
        pivot = df.pivot(index="graph", columns="placer", values="ratio_to_lower_bound")
        report.table(pivot.reset_index(), caption="makespan / lower bound")
        report.figure(
            bar_compare(
                df,
                value="ratio_to_lower_bound",
                category="graph",
                series="placer",
                title="makespan / lower bound",
            )
        )
        if keep:
            best = df[df.graph == "llama_layer"].sort_values("makespan").placer.iloc[0]
            chosen = {
                k: keep["traces"][k]
                for k in dict.fromkeys(["round-robin", "cp", best])
                if k in keep["traces"]
            }
            report.figure(
                compare_gantt(
                    chosen, keep["graph"], title="llama_layer: device timelines", time_unit="s"
                )
            )

    ctx.sections.append(("baselines", render))


def step_paper_graphs(ctx: DemoContext) -> None:
    """The paper's released graphs under paper semantics, against YARDSTICK's best known."""
    found = paper_graphs_dir(ctx.paper_graphs)
    graphs = load_paper_graphs(found)
    if not graphs:
        ctx.summary["paper"] = None

        def render_absent(report) -> None:
            report.heading("The paper's graphs")
            report.text(
                "Not found. They ship with the paper's code (github.com/xinyuyao/Doppler, folder "
                f"`compute_graph`): {PAPER_GRAPHS_HINT}, or run `doppler-lab demo --paper-graphs "
                "DIR` to include them."
            )

        ctx.sections.append(("paper", render_absent))
        return
    rows = []
    for name, g in tqdm(
        graphs.items(), desc="demo: paper graphs", leave=False, disable=not ctx.progress
    ):
        r, _ = _placer_rows(
            name,
            g,
            default_cluster(g),
            "paper",
            ("round-robin", "cp", "heft", "clustering"),
            ctx.seed,
        )
        known = best_known(name)
        for row in r:
            row["best_known"] = known
            row["gap_to_best_known"] = row["makespan"] / known - 1 if known else None
        rows += r
    df = pd.DataFrame(rows)
    ctx.summary["paper"] = df.to_dict(orient="records")

    def render(report) -> None:
        report.heading("The paper's graphs (paper semantics, 4 devices)")
        report.text(
            "Makespans in the paper's cost units; best known from long simulated-annealing searches."
        )
        report.table(df, caption="baselines vs best known")

    ctx.sections.append(("paper", render))


#: the workload of the training step (a shipped checkpoint is used when there is one)
TRAIN_WORKLOAD = "llama_block"
#: the executable workload of the real run, full and ``--quick`` (ops of about a millisecond)
EXECUTOR_WORKLOAD = {False: "chainmm:scale=0.08", True: "chainmm:matrices=3,scale=0.02"}


def step_training(ctx: DemoContext) -> None:
    """A short DOPPLER Stage II from the shipped checkpoint of the workload (else from a short
    Stage I), against its starting point and the Critical Path teacher."""

    cluster = make_cluster("p100x4")
    graph = build(TRAIN_WORKLOAD, scale=ctx.scale)
    episodes, imitation, samples = (32, 16, 2) if ctx.quick else (960, 200, 16)
    recipe = replace(
        FINETUNE_RECIPE, imitation_episodes=imitation, sim_episodes=episodes, seed=ctx.seed
    )
    where = ctx.out_dir / "training"
    res = short_finetune(graph, cluster, "wc", where, recipe, samples, ctx.progress)
    rows = pd.DataFrame(res.rows)
    ctx.summary["training"] = {
        "workload": TRAIN_WORKLOAD,
        "start": res.start_how,
        "episodes": episodes,
        "rows": res.rows,
    }

    def render(report) -> None:

        report.heading("Learning placements: a short DOPPLER training")
        report.text(
            f"The DOPPLER dual policy on {graph.name} ({graph.compute_nodes.size} ops, 4 x P100, "
            f"wc semantics) starts from {res.start_how} and trains {episodes} more Stage II "
            "episodes (REINFORCE on simulated makespans). Policies are judged by the protocol: "
            "the best of the greedy rollout and sampled rollouts; `vs_cp` is the improvement "
            "over the Critical Path teacher. A shipped checkpoint has had Stages I and II "
            "already (see `data/checkpoints/index.json`), so a few hundred more episodes move "
            "it little; from a short Stage I the curve falls further."
        )
        report.table(
            rows,
            caption="makespan, greedy rollout, ratio to the lower bound",
            units={"makespan": "s", "greedy": "s", "ratio_lb": "x"},
        )
        report.figure(
            learning_curves(
                res.curve,
                metrics=["greedy_cost", "cost_mean", "cost_min"],
                smoothing=0.3,
                title="Stage II: simulated makespan (s) of the greedy rollout and the episodes",
            )
        )
        report.figure(
            compare_gantt(
                res.traces, graph, title=f"{graph.name}: teacher, start, trained", time_unit="s"
            )
        )

    ctx.sections.append(("training", render))


def step_executor(ctx: DemoContext) -> None:
    """A real run on 2 CPU worker devices under two placements: outputs checked against the
    single-device reference, measured against simulated makespans, measured timelines."""

    graph = graph_from_spec(EXECUTOR_WORKLOAD[ctx.quick])
    res = executor_comparison(
        graph, 2, ("round-robin", "cp"), repeats=2 if ctx.quick else 5, seed=ctx.seed
    )
    ctx.summary["executor"] = {
        "workload": EXECUTOR_WORKLOAD[ctx.quick],
        "cluster": res.cluster_how,
        "rows": res.rows,
    }

    def render(report) -> None:

        report.heading("A real run on CPU worker devices")
        report.text(
            f"{graph.name} ({graph.compute_nodes.size} ops) runs on 2 CPU worker devices with the "
            "work-conserving executor (an op starts once its inputs are on its device and the "
            "device is free). Outputs are compared with a single-device reference run; the "
            f"measured makespan (median of the runs) with the simulator's, {res.cluster_how}, "
            "and with the uncalibrated `cpu` preset. On a machine busy with other work the "
            "workers share fewer cores than they think, and measured times grow."
        )
        report.table(pd.DataFrame(res.rows), caption="measured vs simulated makespan")
        report.figure(
            compare_gantt(res.traces, graph, title="measured device timelines", time_unit="s")
        )

    ctx.sections.append(("executor", render))


#: the model of the import step (a Hugging Face Llama from a config, random weights), by
#: ``quick``: a node per aten op and sizes where the placers differ and use several devices (at
#: module-scope granularity, or smaller, the graph is a chain every placer keeps on one device)
IMPORTED_MODEL = {
    False: "hf-llama:layers=2,hidden=512,heads=8,seq=128,granularity=op",
    True: "hf-llama:layers=1,hidden=256,heads=4,seq=64,granularity=op",
}


def _devices_used(placement, ops) -> int:  # noqa: ANN001 - a Placement and node ids
    """How many devices a placement puts the graph's ops on."""
    return int(len(set(placement.device[ops].tolist())))


def step_imported_model(ctx: DemoContext) -> None:
    """A Hugging Face Llama imported through torch.export, placed by the Critical Path teacher
    and the shipped DOPPLER policy, simulated with wc semantics on 4 x P100."""

    spec = IMPORTED_MODEL[ctx.quick]
    graph = graph_from_spec(spec)
    rows, placements = placer_comparison(graph, "p100x4", ("cp", "doppler"), noise=0.0, seeds=[0])
    traces = simulated_traces(graph, "p100x4", placements)
    keys = ("placer", "makespan", "lower_bound", "ratio_lb", "vs_cp")
    s = graph.summary()
    ops = graph.compute_nodes
    ctx.summary["imported"] = {
        "spec": spec,
        "nodes": s["nodes"],
        "compute_nodes": s["compute_nodes"],
        "rows": [
            {**{k: r[k] for k in keys}, "devices_used": _devices_used(placements[r["placer"]], ops)}
            for r in rows
        ],
    }

    def render(report) -> None:

        report.heading("Bring your own model: an imported Hugging Face Llama")
        report.text(
            f"`{spec}` (random weights) goes through torch.export into a dataflow graph of "
            f"{s['compute_nodes']} ops (one per aten op, so that q, k and v projections and the "
            f"MLP's gate and up projections can run side by side) and "
            f"{s['inputs']} inputs (weights and token ids, stored with the graph). It is placed "
            f"by the Critical Path teacher and by the shipped DOPPLER policy `{IMPORTED_POLICY}` "
            "(trained on a generated Llama layer, never on an imported graph) and simulated on "
            "4 x P100. `doppler-lab import` and notebook 12 do the same for any model."
        )
        report.table(
            pd.DataFrame(ctx.summary["imported"]["rows"]),
            caption="simulated makespan",
            units={"makespan": "s", "lower_bound": "s"},
        )
        report.figure(
            compare_gantt(traces, graph, title=f"{spec}: device timelines", time_unit="s")
        )

    ctx.sections.append(("imported model", render))


STEPS: list[tuple[str, Callable[[DemoContext], None]]] = [
    ("baselines", step_baselines),
    ("paper graphs", step_paper_graphs),
    ("training", step_training),
    ("imported model", step_imported_model),
    ("executor", step_executor),
]


def run_demo(
    out_dir: str | Path = "reports/demo",
    scale: float = 1.0,
    seed: int = 0,
    quick: bool = False,
    paper_graphs: str | None = None,
    progress: bool = True,
) -> Path:
    """Run every step and write ``out_dir/index.html`` and ``out_dir/summary.json`` (with
    progress bars on stderr unless ``progress`` is False)."""

    ctx = DemoContext(
        Path(out_dir),
        scale=scale,
        seed=seed,
        quick=quick,
        paper_graphs=paper_graphs,
        progress=progress,
    )
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    for label, step in tqdm(STEPS, desc="demo", unit="step", disable=not progress):
        t0 = time.perf_counter()
        step(ctx)
        ctx.timings[label] = round(time.perf_counter() - t0, 2)
    report = HtmlReport(
        "doppler_lab demo", subtitle=f"doppler-lab demo, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    report.text(
        "An end-to-end tour of the workbench: generated dataflow graphs, baseline placers, the "
        "simulator, learned DOPPLER policies and a real work-conserving run."
    )
    for _, render in ctx.sections:
        render(report)
    report.heading("Step timings")
    report.table(pd.DataFrame([{"step": k, "seconds": v} for k, v in ctx.timings.items()]))
    ctx.summary["timings"] = ctx.timings
    path = report.write(ctx.out_dir / "index.html")
    write_json(ctx.out_dir / "summary.json", ctx.summary)
    return path


__all__ = ["STEPS", "DemoContext", "run_demo"]

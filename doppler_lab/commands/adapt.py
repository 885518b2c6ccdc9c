"""``doppler-lab adapt GRAPH``: fine-tune a DOPPLER policy (default ``doppler/general``) to one
graph and cluster with a per-instance bias table (:mod:`doppler_lab.search.adapter`);
resumable in --out.

The run folder gets ``adapter.pt`` (the table; ``place --placer doppler -o adapter=FILE`` uses
it), ``placement.json`` (the best placement simulated on the way), ``summary.json``,
``curve.html`` (makespan against simulator calls) and ``state.pt`` (the progress an interrupted
run resumes from; rerunning a finished run only reports it again).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ..house.deps import require
from ..house.errors import ConfigError
from ..house.progress import format_time, show_progress
from ._common import (
    add_cluster_arguments,
    add_estimator_argument,
    add_graph_argument,
    add_semantics_argument,
    int_arg,
    print_json,
    resolve_cluster,
    resolve_semantics,
    source_label,
)

NAME = "adapt"
HELP = (
    "fine-tune a DOPPLER policy (default doppler/general) to one graph: a per-instance table on "
    "its placement logits, resumable in --out"
)

#: fields of :class:`~doppler_lab.search.adapter.AdaptConfig` the command sets from its own flags
OWN_FIELDS = ("episodes", "estimator")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_graph_argument(p)
    add_cluster_arguments(p)
    add_semantics_argument(p, "simulator semantics of the objective")
    p.add_argument(
        "--checkpoint",
        metavar="CKPT",
        help="the DOPPLER policy to adapt (a file or a shipped name; default doppler/general)",
    )
    p.add_argument(
        "--episodes",
        type=int_arg(1, "MAX_BUDGET"),
        default=200,
        metavar="N",
        help="simulator calls in all, the policy's proposals included (default 200)",
    )
    p.add_argument("--seed", type=int_arg(0), default=0, help="seed of every draw (default 0)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an adapter setting (doppler_lab.search.adapter.AdaptConfig), e.g. --set "
        "temperature=3 --set batch=8",
    )
    p.add_argument(
        "--out", required=True, metavar="DIR", help="run folder (resumed if it holds a run)"
    )
    add_estimator_argument(p, "the adapter's (doppler_lab.search.adapter.ADAPT_ESTIMATOR)")
    from ..house.runfolder import add_force_argument

    add_force_argument(p)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def adapt_config(args: argparse.Namespace):
    """The :class:`~doppler_lab.search.adapter.AdaptConfig` of the command line."""
    from ..house.settings import parse_items, unknown_setting
    from ..search.adapter import AdaptConfig

    changes = parse_items(args.set, "adapter config")
    valid = [k for k in AdaptConfig.setting_names() if k not in OWN_FIELDS]
    for k in changes:
        if k in OWN_FIELDS:
            raise ConfigError(f"--set {k}: use --{k.replace('_', '-')} instead")
        if k not in valid:
            raise unknown_setting("adapter config", k, valid)
    # the adapter's settings and its proposal set's, flat
    own = {"episodes": args.episodes}
    if args.estimator is not None:
        own["estimator"] = args.estimator
    return AdaptConfig.from_dict({**changes, **own})


def run(args: argparse.Namespace) -> int:
    from ..house.runfolder import run_folder

    with run_folder(args.out, NAME, args.force):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..house.jsonutil import write_json
    from ..house.runners import torch_threads
    from ..io.documents import save_placement
    from ..policies.checkpoint import load_policy
    from ..policies.pretrained import GENERAL_CHECKPOINT, resolve_checkpoint
    from ..search.adapter import adapt

    cfg = adapt_config(args)
    from ..workloads.specs import graph_from_spec

    graph = graph_from_spec(args.graph)
    cluster = resolve_cluster(args, graph)
    semantics = resolve_semantics(args, graph)
    ckpt = resolve_checkpoint(
        GENERAL_CHECKPOINT if args.checkpoint is None else args.checkpoint, "doppler"
    )
    policy, _ = load_policy(ckpt, ("dual", "plc-only"), cluster.num_devices)
    out = Path(args.out)
    t0 = time.perf_counter()
    with torch_threads(1):
        res = adapt(
            policy, graph, cluster, semantics, cfg, seed=args.seed,
            progress=show_progress(args), state=out / "state.pt",
        )  # fmt: skip
    wall = time.perf_counter() - t0
    res.save(out / "adapter.pt", graph, cluster, ckpt)
    save_placement(res.best, out / "placement.json", graph, cluster.num_devices)
    summary: dict[str, Any] = {
        "graph": graph.name,
        "cluster": cluster.name,
        "devices": cluster.num_devices,
        "semantics": semantics,
        "checkpoint": str(ckpt),
        "seed": args.seed,
        "config": cfg.to_dict(),
        "calls": res.calls,
        "greedy_cost": res.greedy_cost,
        "start_cost": res.start_cost,
        "best_cost": res.best_cost,
        "gain": 1.0 - res.best_cost / res.start_cost if res.start_cost > 0 else 0.0,
        "source": res.source,
        "produced_by": res.label,  # the winning proposal's label, or the table from it
        "settle_steps": res.settle_steps,
        "wall_s": wall,
        "adapter": str(out / "adapter.pt"),
        "placement": str(out / "placement.json"),
        "curve": _curve(res, out / "curve.html", graph.name, cluster.name),
        "rows": res.rows,
    }
    write_json(out / "summary.json", summary)
    if args.json:
        print_json(summary)
        return 0
    secs = graph.compute_cost is None  # modelled costs are seconds; explicit ones the file's units
    print(
        f"adapted {ckpt.name} to {graph.name} ({cluster.name}, {semantics}) in {res.calls} "
        f"simulator calls: makespan {format_time(res.start_cost, secs)} -> "
        f"{format_time(res.best_cost, secs)} "
        f"({summary['gain']:.1%} better; best from the {source_label(res.source)}), {wall:.3g} s"
    )
    if res.settle_steps >= 0:
        print(f"  the greedy rollout with the table reproduces it ({res.settle_steps} steps)")
    else:
        print("  the greedy rollout with the table does not reproduce it (placement.json does)")
    print(
        f"  place with it: doppler-lab place {args.graph} --placer doppler -o adapter={out}/adapter.pt"
    )
    print(f"  wrote {out}/adapter.pt, placement.json, summary.json, curve.html")
    return 0


def _curve(res: Any, path: Path, graph: str, cluster: str) -> str:
    """``curve.html``: the best makespan so far and each update's batch against the calls."""
    go = require("plotly.graph_objects", "the adapt curve (curve.html)")

    from ..viz.html import HtmlReport

    x = [r["calls"] for r in res.rows]
    fig = go.Figure()
    for key, name in (("cost_best", "best so far"), ("cost_min", "batch best"),
                      ("cost_mean", "batch mean")):  # fmt: skip
        fig.add_scatter(x=x, y=[r[key] for r in res.rows], mode="lines+markers", name=name)
    fig.add_hline(y=res.start_cost, line_dash="dot", annotation_text="best proposal")
    fig.update_layout(
        title=f"adapter on {graph} ({cluster})",
        xaxis_title="simulator calls",
        yaxis_title="makespan",
    )
    report = HtmlReport(f"adapter: {graph} on {cluster}")
    report.figure(fig)
    return str(report.write(path))

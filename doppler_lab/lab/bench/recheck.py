"""Adoption checks that the machine failed, not the code: the older code run again here.

An adoption check (:mod:`~doppler_lab.lab.bench.adopt`) trains one seed of a cell with the
current code and compares it with the run an older code version stored. Training is
deterministic on one machine, but not across machines: another CPU (another vector width in
torch's, numpy's or numba's kernels) rounds differently, and 2000 episodes of policy gradient
turn the last bit into another policy. A run stored by another machine then fails its check
whatever the code change was: on 7 December 2026 the code version ``d8a3c0df0062``, run again
on the session's machine, gave 1600.04 on ``chain_mm_112nodes`` seed 0 where its own stored run
(another session's machine) says 1300.10, and so did ``e9bd7ec7cf35``.

The question a check asks is whether the code change changes the numbers. :func:`recheck`
answers it on one machine: for each failed check it finds the older version's commit in the
repository's history (:func:`~doppler_lab.house.codeversion.commit_of_version`), trains the
check seed with that code in a git worktree, in a subprocess, here, and compares it with the
current code's check run (same digests of metrics and weights, same numbers). Equal: the code
change is neutral, and the stored runs were trained by code that gives this code's numbers on
their own machine; the ledger entry becomes ``identical`` with a ``recheck`` record (commit,
machine, what the stored run differed in), and the next sweep adopts. Different: the entry
stays failed, with the recheck's differences, and is not rechecked again. The evidence is one
seed per cell, as for any check.

Only the run store's configuration can be rebuilt: :func:`settings_for` searches the ``bench
policy`` settings whose run folder is the check run's (the folder name is a digest of the
whole configuration, so a match is the configuration), and the older code must give the older
run's folder name for them too, or nothing is trained.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...house import codeversion, runstore
from ...house.errors import ConfigError
from ...house.jsonutil import write_json
from ...house.paths import paper_graphs_dir
from ...house.validate import read_json_object
from . import adopt

#: the old code's side: build the sweep's configuration, check the run folder's name, train
_OLD_CODE = """
import json, sys
from pathlib import Path
from doppler_lab.house.codeversion import code_version
from doppler_lab.lab.bench.policy import PolicyBenchConfig, _cases, case_run_dir, run_case
a = json.loads(sys.argv[1])
if code_version() != a["version"]:
    sys.exit(f"the worktree's code version is {code_version()}, expected {a['version']}")
cfg = PolicyBenchConfig.of_graphs([a["graph"]], **a["settings"])
case = next(c for c in _cases(cfg)[0] if c.name == a["name"])
run_dir = case_run_dir(cfg, case, a["method"], a["seed"], Path(a["root"]))
if run_dir.name != a["expect"]:
    sys.exit(f"this code names the run {run_dir.name}, the stored run is {a['expect']}")
run_case(cfg, case, a["method"], a["seed"], Path(a["root"]), adopt_older=False)
print(json.dumps({"run_dir": str(run_dir)}))
"""

_LOCK = threading.Lock()  # worktrees and ledgers: one writer at a time among a recheck's jobs


@dataclass(frozen=True)
class FailedCheck:
    """A ledger entry ``OLD->CURRENT`` whose check failed and was not rechecked."""

    cell: Path  # the cell folder in the run cache: <cache>/<graph>/<method>
    pair: str  # "OLD->NEW"
    entry: dict[str, Any]

    @property
    def old_version(self) -> str:
        return self.pair.partition("->")[0]


def machine() -> str:
    """This machine in one line (:func:`~doppler_lab.house.runstore.machine`)."""
    m = runstore.machine()
    return (
        f"{m['cpu']} (flags {m['cpu_flags_sha256']}), torch {m['torch']} {m['torch_vector']}, "
        f"{m['cores']} cores"
    )


def _checks_of_current(root: Path) -> Iterator[tuple[Path, str, dict[str, Any]]]:
    """``(cell folder, "OLD->CURRENT", entry)`` of every check of the current code recorded in
    the run cache ``root``'s ledgers, by cell."""
    current = codeversion.code_version()
    for ledger in sorted(Path(root).rglob(adopt.LEDGER)):
        for pair, entry in adopt.ledger(ledger.parent).items():
            if isinstance(entry, dict) and pair.partition("->")[2] == current:
                yield ledger.parent, pair, entry


def failed_checks(root: Path, cells: set[str] | None = None) -> list[FailedCheck]:
    """The failed, not yet rechecked, checks of the current code in the run cache ``root``
    (only in ``cells``, ``graph/method`` folders, when given)."""
    return [
        FailedCheck(cell, pair, entry)
        for cell, pair, entry in _checks_of_current(root)
        if entry.get("identical") is False
        and "recheck" not in entry
        and (cells is None or cell.relative_to(root).as_posix() in cells)
    ]


def _candidates(result: dict[str, Any]) -> list[dict[str, Any]]:
    """``bench policy`` settings a run with this ``result`` may have been trained under."""
    from ...train.train_config import TRAIN_PRESETS

    episodes, rl = int(result["episodes"]), int(result["rl_episodes"])
    learners = [k for k, v in TRAIN_PRESETS.items() if v.stage == "sim"]
    budgets = sorted(
        {(e, i) for e in (episodes, 4000, 2 * episodes) for i in (episodes - rl, 2000, 400, 0)}
    )
    return [
        {"methods": [result["method"]], "episodes": e, "imitation_episodes": i, "learner": lr}
        for (e, i), lr in itertools.product(budgets, learners)
        if 0 <= i < e
    ]


def settings_for(new_dir: Path, paper_dir: str | None) -> dict[str, Any] | None:
    """The settings of :meth:`PolicyBenchConfig.of_graphs` (JSON) whose run folder for the
    check run's (graph, method, seed) is ``new_dir`` by the current code; None if none is."""
    from .policy import PolicyBenchConfig, _cases, case_run_dir

    result = read_json_object(new_dir / "result.json", "a check run's result")
    for settings in _candidates(result):
        settings = {**settings, "paper_dir": paper_dir}
        try:
            cfg = PolicyBenchConfig.of_graphs([result["graph"]], **settings)
        except ConfigError:
            continue
        for case in _cases(cfg)[0]:
            if case.name != result["graph"]:
                continue
            got = case_run_dir(cfg, case, result["method"], int(result["seed"]), Path("."))
            if got.name == new_dir.name:
                return settings
    return None


def run_old_code(
    commit: str, version: str, args: dict[str, Any], workdir: Path, repo: Path
) -> Path:
    """Train the check run with the code of ``commit`` (a worktree in ``workdir``, in a
    subprocess); its run folder."""
    tree = workdir / f"code-{commit[:12]}"
    with _LOCK:
        if not tree.is_dir():
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "add", "--detach", "-f", str(tree), commit],
                check=True,
                capture_output=True,
            )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        [sys.executable, "-c", _OLD_CODE, json.dumps({**args, "version": version})],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the code of {commit[:12]} failed: {tail[0]}")
    return Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])


#: how a recheck trains the older code's run: (commit, version, args, workdir, repo) -> run dir
OldRunner = Callable[[str, str, dict[str, Any], Path, Path], Path]


def recheck(
    root: Path,
    repo: Path | None = None,
    paper_dir: str | None = None,
    run_old: OldRunner = run_old_code,
    report: Callable[[str], None] | None = None,
    jobs: int = 1,
    cells: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Recheck every failed check in the run cache ``root`` (in ``cells`` only, when given) on
    this machine (see the module docstring), ``jobs`` at a time (each trains one run in a
    subprocess); the ledgers of the cache and of its store (if it has one) get the verdicts.

    Returns:
        Per failed check: ``cell``, ``pair``, ``verdict`` (``identical``, ``differs`` or
        ``not rechecked``) and ``why``.
    """
    root = Path(root)
    repo = Path(repo or codeversion.PACKAGE_DIR.parent)
    paper = str(paper_graphs_dir(paper_dir) or "") or None
    say = report or (lambda line: None)
    store = runstore.store_for(root)
    workdir = Path(tempfile.mkdtemp(prefix="recheck-"))

    def one(check: FailedCheck) -> dict[str, str]:
        row = {"cell": check.cell.relative_to(root).as_posix(), "pair": check.pair}
        row.update(_recheck_one(check, root, repo, paper, run_old, workdir, store))
        say(f"{row['cell']} {row['pair']}: {row['verdict']} ({row['why']})")
        return row

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            out = list(pool.map(one, failed_checks(root, cells)))
    finally:
        for tree in workdir.glob("code-*"):
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def _recheck_one(
    check: FailedCheck,
    root: Path,
    repo: Path,
    paper: str | None,
    run_old: OldRunner,
    workdir: Path,
    store: Path | None,
) -> dict[str, str]:
    entry = check.entry
    new_dir = check.cell / str(entry.get("new", ""))
    if not (new_dir / "result.json").exists():
        return {"verdict": "not rechecked", "why": f"the check run {new_dir.name} is not here"}
    if store is not None:
        stored = store / check.cell.relative_to(root) / f"{entry.get('old')}.json"
        trained_on = (
            read_json_object(stored, "a stored run").get("machine") if stored.exists() else None
        )
        if runstore.same_machine(trained_on, runstore.machine()):
            # the check compared two runs of one kind of machine: the difference is the code's
            _write_entry(
                check,
                root,
                store,
                {
                    **entry,
                    "recheck": {"same_machine": True, "identical": False, "machine": machine()},
                },
            )
            return {
                "verdict": "not rechecked",
                "why": "the stored run was trained on a machine like this one: the code differs",
            }
    commit = codeversion.commit_of_version(check.old_version, repo)
    if commit is None:
        return {
            "verdict": "not rechecked",
            "why": f"no commit of {repo} has code version {check.old_version}",
        }
    settings = settings_for(new_dir, paper)
    if settings is None:
        return {"verdict": "not rechecked", "why": "no bench policy settings name this run"}
    result = read_json_object(new_dir / "result.json", "a check run's result")
    args = {
        "graph": result["graph"],
        "name": result["graph"],
        "settings": settings,
        "method": result["method"],
        "seed": int(result["seed"]),
        "root": str(workdir / "runs"),
        "expect": str(entry.get("old")),
    }
    try:
        old_dir = run_old(commit, check.old_version, args, workdir, repo)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as err:
        return {"verdict": "not rechecked", "why": str(err)}
    differences = adopt.differences(old_dir, new_dir)
    recheck_record = {
        "commit": commit,
        "machine": machine(),
        "identical": not differences,
        "stored_run_differences": entry.get("differences", []),
    }
    if differences:
        recheck_record["differences"] = differences
    _write_entry(
        check, root, store, {**entry, "identical": not differences, "recheck": recheck_record}
    )
    if differences:
        return {"verdict": "differs", "why": "; ".join(differences[:3])}
    return {
        "verdict": "identical",
        "why": f"the code of {commit[:12]} gives this version's check run here; the stored "
        "run was trained on another machine",
    }


def _write_entry(check: FailedCheck, root: Path, store: Path | None, entry: dict[str, Any]) -> None:
    """``entry`` in place of the check's in the ledgers of the cache and of its store."""
    with _LOCK:
        for cell in (check.cell, store / check.cell.relative_to(root) if store else None):
            if cell is not None and cell.is_dir():
                ledger = adopt.ledger(cell)
                ledger[check.pair] = entry
                write_json(cell / adopt.LEDGER, ledger)


def seed_cells_rechecked(
    config: Any,
    out_dir: str | Path,
    runner: Any = "local",
    jobs: int | None = 1,
    progress: bool = False,
    keep_going: bool = False,
    run_old: OldRunner = run_old_code,
    **kw: Any,
) -> Any:
    """:func:`~doppler_lab.lab.bench.policy.seed_cells` after the adoption checks of its sweep,
    with every failed check rechecked on this machine first (:func:`recheck`): a cell whose
    stored runs another machine trained is adopted instead of trained again, where the older
    code gives the current code's check run here. The checks' and rechecks' verdicts are
    printed (what a page shows of them); then ``seed_cells`` finds them in the ledgers and
    only trains what no check lets it adopt."""
    from .policy import _cases, seed_cells, verify_adoptions

    root = Path(out_dir)
    restored = runstore.restore_for(root)
    cases, _ = _cases(config)
    # the runs of seed_cells' sweep (policy.ablation_rows), in its order
    runs = [(c, m, s) for c in cases for m in config.methods for s in range(config.seeds)]
    tasks = [(config, c, m, s, root) for c, m, s in runs]
    notes = verify_adoptions(tasks, runner, jobs, progress, keep_going)
    mine = {f"{c.name}/{m}" for c, m, _ in runs}  # this sweep's cells, not the whole cache's
    if failed_checks(root, mine):
        rows = recheck(
            root,
            paper_dir=config.paper_dir,
            run_old=run_old,
            jobs=jobs or os.cpu_count() or 1,
            cells=mine,
        )
        notes += [f"recheck of {r['cell']} {r['pair']}: {r['verdict']} ({r['why']})" for r in rows]
    for line in filter(None, [restored, *notes]):
        print(line)
    return seed_cells(
        config, root, runner=runner, jobs=jobs, progress=progress, keep_going=keep_going, **kw
    )


def rechecked_cells(root: Path) -> set[str]:
    """The cells (``graph/method``) of the run cache ``root`` whose check of the current code
    passed on a recheck."""
    return {
        cell.relative_to(root).as_posix()
        for cell, _, entry in _checks_of_current(root)
        if entry.get("identical") is True and "recheck" in entry
    }


def summary_line(results: list[dict[str, Any]], root: Path) -> str:
    """One sentence for a page beside :func:`~doppler_lab.lab.bench.adopt.summary_line`: how
    many adopted runs lie in cells whose check passed only on a recheck (empty when none)."""
    cells = rechecked_cells(root)
    hit = [r for r in results if r.get("adopted") and f"{r['graph']}/{r['method']}" in cells]
    if not hit:
        return ""
    n_cells = len({f"{r['graph']}/{r['method']}" for r in hit})
    return (
        f"{len(hit)} of the adopted runs lie in {n_cells} cell(s) whose check first failed "
        "because the stored runs were trained on another machine (another CPU rounds "
        "differently): the older code, run again on this machine, gave this code's check run "
        "exactly (doppler-lab runs recheck)."
    )


__all__ = [
    "FailedCheck",
    "failed_checks",
    "machine",
    "recheck",
    "rechecked_cells",
    "run_old_code",
    "seed_cells_rechecked",
    "settings_for",
    "summary_line",
]

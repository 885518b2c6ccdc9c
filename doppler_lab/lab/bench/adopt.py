"""Carry finished training runs over a code change, after checking that the new code reproduces
them.

A run directory is keyed by its configuration *and* the code version
(:func:`~doppler_lab.house.codeversion.versioned_key`), so any edit to code that can change a
number retrains every cached run: for a report-size sweep (hundreds of runs, hours on 2 cores)
a refactor that changes nothing would cost the whole sweep again. Here an older code version's
finished runs are *adopted* by the current code, one cell (graph, method) at a time, only after
the current code has re-run one of the cell's seeds (its **check seed**) from scratch and
reproduced it exactly:

- the result's numbers (makespan, greedy, best seen, episode counts) are equal;
- every stage's ``metrics.csv`` (per-update costs, losses, entropies, gradient norms: no clock
  times) is byte-identical;
- every stage's final weights are bitwise equal.

Metrics and weights are compared by their sha256 (:func:`~doppler_lab.house.runstore.stage_digest`):
an older run restored from the committed run store (:mod:`doppler_lab.house.runstore`), which
keeps the digests and not the files, is checked like one trained on this machine.

Any difference and the cell is retrained under the current code; the verdict and what differed
are kept in the cell's ``adoptions.json`` (``{"OLD->NEW": {...}}``), so a later sweep neither
repeats the check nor adopts a failed cell. Verdicts chain: a version shown equal to one that
the current code reproduced needs no check of its own. An adopted run's ``result.json`` comes
back with ``adopted`` (the version it was trained by, the check seed, the current version) and
its checkpoint path where the run lies now.

The check is evidence, not proof: a change that alters only some seeds of a cell (one that
depends on the data a seed draws) would pass on another seed. Training here is deterministic
per seed and the code paths of a cell's seeds are the same, which is why one seed per cell is
taken as enough; a page says how many of its runs were adopted and from which version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...house import codeversion, runstore
from ...house.errors import FormatError
from ...house.jsonutil import write_json
from ...house.validate import read_json_object

#: the result fields that must be equal for a run to count as reproduced (``train_s`` and the
#: checkpoint path are the clock and the place, not the result)
RESULT_FIELDS = ("makespan", "greedy", "best_seen", "episodes", "sim_calls", "rl_episodes")
LEDGER = "adoptions.json"

#: a run directory of one (graph, method, seed) for a code version (``None``: the current one)
RunDirAt = Callable[[str | None], Path]


def _read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, None where there is none (a run in progress, a file cut
    short): a run that cannot be read is never adopted."""
    try:
        return read_json_object(path, "a run's record")
    except FormatError:
        return None


def older_runs(run_dir_at: RunDirAt) -> dict[str, Path]:
    """The finished runs of the same configuration by other code versions: ``{version: dir}``.

    A sibling folder counts only when the key of the configuration under its recorded version
    is its name: a different configuration is never taken for an older version of this one."""
    here = run_dir_at(None)
    prefix = here.name.rsplit("-", 1)[0] + "-"
    found: dict[str, Path] = {}
    if not here.parent.is_dir():
        return found
    for result in sorted(here.parent.glob(f"{prefix}*/result.json")):
        doc = _read_json(result)
        version = doc.get("code_version") if doc else None
        if not isinstance(version, str) or version == codeversion.code_version():
            continue
        if run_dir_at(version).name == result.parent.name:
            found[version] = result.parent
    return found


def ledger(cell: Path) -> dict[str, Any]:
    """The cell's recorded checks: ``{"OLD->NEW": verdict}``."""
    return _read_json(cell / LEDGER) or {}


def _classes(entries: dict[str, Any]) -> dict[str, str]:
    """Versions joined by verdicts of equality: each version's class representative."""
    parent: dict[str, str] = {}

    def find(v: str) -> str:
        while parent.setdefault(v, v) != v:
            v = parent[v]
        return v

    for pair, verdict in entries.items():
        old, _, new = pair.partition("->")
        if isinstance(verdict, dict) and verdict.get("identical") is True:
            parent[find(old)] = find(new)
    return {v: find(v) for v in list(parent)}


def verdict(cell: Path, version: str) -> bool | None:
    """Whether the current code reproduces ``version``'s runs in ``cell``: True (a check in
    its class of equal versions passed), False (a check of a version of its class failed: a
    failure wins over any pass, as it shows the runs are not reproducible), None (not checked)."""
    return _verdict(ledger(cell), version)


def _verdict(entries: dict[str, Any], version: str) -> bool | None:
    """:func:`verdict` from a cell's ledger ``entries``."""
    current = codeversion.code_version()
    classes = _classes(entries)
    mine = classes.get(version, version)
    for pair, entry in entries.items():
        old, _, new = pair.partition("->")
        failed = isinstance(entry, dict) and entry.get("identical") is False
        if failed and new == current and classes.get(old, old) == mine:
            return False
    if mine == classes.get(current, current):
        return True if version != current else None
    return None


def differences(old_dir: Path, new_dir: Path) -> list[str]:
    """What differs between two runs of one configuration (empty: the same run). A stage's
    metrics and weights are compared by their digests (:func:`~doppler_lab.house.runstore.
    stage_digest`), so a run restored from the run store, which keeps only the digests, compares
    like one trained here."""
    old, new = _read_json(old_dir / "result.json"), _read_json(new_dir / "result.json")
    if old is None or new is None:
        return [f"result.json missing in {(new_dir if old else old_dir).name}"]
    out = [
        f"{f} {old.get(f)!r} vs {new.get(f)!r}" for f in RESULT_FIELDS if old.get(f) != new.get(f)
    ]
    a, b = runstore.stage_dirs(old_dir), runstore.stage_dirs(new_dir)
    if [p.name for p in a] != [p.name for p in b]:
        return out + [f"stages {[p.name for p in a]} vs {[p.name for p in b]}"]
    for s_old, s_new in zip(a, b, strict=True):
        d_old, d_new = runstore.stage_digest(s_old), runstore.stage_digest(s_new)
        if d_old["metrics_sha256"] is None or d_new["metrics_sha256"] is None:
            out.append(f"{s_old.name}/metrics.csv missing")
        elif d_old["metrics_sha256"] != d_new["metrics_sha256"]:
            out.append(f"{s_old.name}/metrics.csv differs")
        if d_old["weights_sha256"] is None or d_new["weights_sha256"] is None:
            out.append(f"{s_old.name}/policy.pt missing")
        elif d_old["weights_sha256"] != d_new["weights_sha256"]:
            out.append(f"{s_old.name}/policy.pt weights differ")
    return out


def record(cell: Path, version: str, old_dir: Path, new_dir: Path, seed: int) -> str:
    """Compare the check seed's two runs, keep the verdict in the cell's ledger and return a
    one-line note of it."""
    diff = differences(old_dir, new_dir)
    current = codeversion.code_version()
    entries = ledger(cell)
    entries[f"{version}->{current}"] = {
        "identical": not diff,
        "check_seed": seed,
        "old": old_dir.name,
        "new": new_dir.name,
        "differences": diff,
    }
    write_json(cell / LEDGER, entries)
    where = f"{cell.parent.name}/{cell.name}"
    if diff:
        return (
            f"{where}: code version {version}'s runs retrained, seed {seed} did not reproduce "
            f"under {current} ({'; '.join(diff[:3])})"
        )
    return f"{where}: code version {version}'s runs adopted (seed {seed} reproduced exactly)"


def adopted(run_dir_at: RunDirAt) -> dict[str, Any] | None:
    """An older code version's result of this run if its cell's check passed, else None."""
    here = run_dir_at(None)
    entries = ledger(here.parent)
    classes = _classes(entries)
    for version, old_dir in older_runs(run_dir_at).items():
        if _verdict(entries, version) is not True:
            continue
        doc = _read_json(old_dir / "result.json")
        if doc is None:
            continue
        entry = entries.get(f"{version}->{codeversion.code_version()}") or next(
            (
                e
                for k, e in entries.items()
                if isinstance(e, dict)
                and e.get("identical") is True
                and classes.get(k.partition("->")[0]) == classes.get(version)
            ),
            {},
        )
        inside = runstore.checkpoint_in_run(doc.get("checkpoint", ""), old_dir)
        if inside is not None:  # the checkpoint where the run lies now
            doc["checkpoint"] = str(old_dir / inside)
        doc["adopted"] = {
            "from": version,
            "under": codeversion.code_version(),
            "check_seed": entry.get("check_seed"),
        }
        return doc
    return None


def checks_needed(
    runs: Iterable[tuple[Any, int, RunDirAt]],
) -> list[tuple[Any, int, str, Path, bool]]:
    """The checks a sweep needs before it can adopt: one per (cell, class of older versions)
    without a verdict. A seed the current code has already finished is compared as it is (no
    run); otherwise the lowest seed that has the older run is trained anew.

    Args:
        runs: ``(task, seed, run_dir_at)`` of every run of the sweep (``task`` is handed back).

    Returns:
        ``(task, seed, version, old_dir, needs_run)`` per check.
    """
    picked: dict[tuple[Path, str], tuple[Any, int, str, Path, bool]] = {}
    for task, seed, run_dir_at in runs:
        here = run_dir_at(None)
        needs_run = not (here / "result.json").exists()
        entries = ledger(here.parent)
        classes = _classes(entries)
        for version, old_dir in older_runs(run_dir_at).items():
            if _verdict(entries, version) is not None:
                continue
            slot = (here.parent, classes.get(version, version))
            best = picked.get(slot)
            # a finished seed beats any seed to train; then the lowest seed
            if best is None or (not needs_run, -seed) > (not best[4], -best[1]):
                picked[slot] = (task, seed, version, old_dir, needs_run)
    return list(picked.values())


def trained_by(result: dict[str, Any]) -> str:
    """The code version that trained a run (an adopted run's older version)."""
    return str((result.get("adopted") or {}).get("from") or result.get("code_version", "?"))


def summary_line(results: Iterable[dict[str, Any]]) -> str:
    """One sentence for a page or report: how many runs were adopted and from which versions
    (empty when none was)."""
    results = list(results)
    older: dict[str, int] = {}
    for r in results:
        if r.get("adopted"):
            older[trained_by(r)] = older.get(trained_by(r), 0) + 1
    if not older:
        return ""
    under = next(r["adopted"]["under"] for r in results if r.get("adopted"))
    return (
        f"{sum(older.values())} of {len(results)} runs were trained by an older code version ("
        + ", ".join(f"{v}: {n}" for v, n in sorted(older.items()))
        + f") and adopted by {under} after one check seed per cell, trained again by "
        "this code, reproduced its run exactly (numbers, per-update metrics and weights)."
    )


__all__ = [
    "LEDGER",
    "summary_line",
    "trained_by",
    "RESULT_FIELDS",
    "adopted",
    "checks_needed",
    "differences",
    "ledger",
    "older_runs",
    "record",
    "verdict",
]

"""The run store: finished training runs kept in the checkout, so that a report build that takes
longer than one machine's lifetime goes on where the last one stopped.

A run cache (``runs/bench_policy``) holds each (graph, method, seed) run in its own folder:
``result.json``, and per training stage ``metrics.csv``, ``policy.pt`` (weights), resume
checkpoints, ``config.json`` and ``summary.json``. The cache is not committed (a run's weights
and checkpoints are megabytes; a report-size sweep has hundreds of runs). The store is, at
``data/runs/<cache>/``: one small JSON record per finished run, at the run folder's path
(``data/runs/bench_policy/chain_mm_112nodes/doppler/seed0-a3a65faa.json``), holding

- the run's ``result.json`` (its ``checkpoint`` made relative to the run folder);
- per stage: ``config.json``, ``summary.json``, and the sha256 of ``metrics.csv`` and of the
  final weights (:func:`weights_digest`: every tensor's name, dtype, shape and bytes);
- for a run trained in the cache it is kept from (not restored, not adopted): the machine that
  keeps it (:func:`machine`), which trained it where a cache lives on one machine, as training
  is deterministic per machine, not across machines (records kept before 8 December 2026 have
  none);

and each cell's adoption ledger (``adoptions.json``, see :mod:`doppler_lab.lab.bench.adopt`).

:func:`keep` records a cache's finished runs (``doppler-lab runs keep``; :func:`keeping` does it
every few minutes while a long job runs, as ``doppler-lab report`` does while it builds the
site). :func:`restore` writes a record back as a run folder where the cache lacks it (a sweep
over a stored cache does it before it starts): ``result.json``, and per stage ``config.json``,
``summary.json`` and ``digest.json`` (the two digests) in place of the metrics and weights. A
sweep counts a restored run as finished, and :mod:`~doppler_lab.lab.bench.adopt` compares a
check seed with it by the digests, so a later code version can still adopt it. What a restored
run lacks is its weights: ``result.json``'s ``checkpoint`` names where they would be, and no
file is there (``bench policy`` exports only the checkpoints that exist).

Only caches whose readers need no weights are stored (:data:`STORED_CACHES`).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FormatError
from .jsonutil import write_json
from .paths import REPO_ROOT, RUN_STORE

FORMAT = 1
#: the run caches under ``runs/`` that have a store (their pages read results, not weights)
STORED_CACHES: tuple[str, ...] = ("bench_policy",)
RESULT = "result.json"
DIGEST = "digest.json"
LEDGER = "adoptions.json"
_STAGE_FILES = ("config.json", "summary.json")


def store_for(root: str | Path) -> Path | None:
    """The store of the run cache ``root``: ``data/runs/<name>`` of the checkout when ``root``
    is ``runs/<name>`` there and ``<name>`` is a stored cache, else None."""
    root = Path(root).resolve()
    if root.parent == (REPO_ROOT / "runs").resolve() and root.name in STORED_CACHES:
        return REPO_ROOT / RUN_STORE / root.name
    return None


def weights_digest(path: str | Path) -> str:
    """The sha256 of a saved policy's weights: each tensor of its ``state_dict`` by name (sorted),
    with its dtype, shape and bytes. Two files have the same digest when their weights are
    bitwise equal, whatever else the file holds."""
    import torch

    doc = torch.load(path, map_location="cpu", weights_only=True)
    state = doc.get("state_dict", {}) if isinstance(doc, dict) else {}
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _read(path: Path, what: str) -> dict[str, Any]:
    from .validate import read_json_object

    return read_json_object(path, what)


def checkpoint_in_run(checkpoint: str | Path, run_dir: Path) -> Path | None:
    """Where ``checkpoint`` (a path a run's ``result.json`` recorded) lies inside its run folder,
    relative to it (``2_sim/policy.pt``): the part after the run folder's name, wherever the
    folder lay when it was recorded; None when the path does not pass through such a folder."""
    parts = Path(str(checkpoint or "")).parts
    if run_dir.name not in parts:
        return None
    return Path(*parts[parts.index(run_dir.name) + 1 :])


def stage_digest(stage: Path) -> dict[str, str | None]:
    """A stage folder's ``metrics_sha256`` and ``weights_sha256`` (None where the file is
    missing): from its ``metrics.csv`` and ``policy.pt``, or, for a restored run, from its
    ``digest.json``."""
    if not (stage / "metrics.csv").exists() and (stage / DIGEST).exists():
        doc = _read(stage / DIGEST, "a restored stage's digests")
        return {k: doc.get(k) for k in ("metrics_sha256", "weights_sha256")}
    metrics = stage / "metrics.csv"
    weights = stage / "policy.pt"
    return {
        "metrics_sha256": hashlib.sha256(metrics.read_bytes()).hexdigest()
        if metrics.exists()
        else None,
        "weights_sha256": weights_digest(weights) if weights.exists() else None,
    }


def stage_dirs(run_dir: Path) -> list[Path]:
    """A run folder's stage folders (with ``metrics.csv``, or ``digest.json`` when restored),
    by name."""
    found = {p.parent for p in run_dir.glob("*/metrics.csv")}
    found |= {p.parent for p in run_dir.glob(f"*/{DIGEST}")}
    return sorted(found, key=lambda p: p.name)


def _result(run_dir: Path, raw: dict[str, Any] | None = None) -> dict[str, Any]:
    """A finished run folder's ``result.json`` (``raw``, when read already) as the store keeps
    it: the checkpoint relative to the run folder, without the mark of a restored run."""
    result = dict(raw) if raw is not None else _read(run_dir / RESULT, "a run's result")
    inside = checkpoint_in_run(result.get("checkpoint") or "", run_dir)
    if inside is not None:  # relative to the run folder, wherever it lies
        result["checkpoint"] = inside.as_posix()
    result.pop("restored", None)
    return result


def record(run_dir: Path) -> dict[str, Any]:
    """The store's record of a finished run folder (see the module docstring)."""
    result = _result(run_dir)
    stages = {}
    for stage in stage_dirs(run_dir):
        entry: dict[str, Any] = dict(stage_digest(stage))
        for name in _STAGE_FILES:
            if (stage / name).exists():
                entry[name.removesuffix(".json")] = _read(stage / name, f"a stage's {name}")
        stages[stage.name] = entry
    return {"format": FORMAT, "result": result, "stages": stages}


#: what a machine's record holds that decides a training run's rounding (``cores`` is for
#: the reader: a run trains on one torch thread)
MACHINE_KEYS = ("cpu", "cpu_flags_sha256", "torch", "torch_vector", "numpy", "numba")


def machine() -> dict[str, Any]:
    """This machine as far as it decides a training run's last bits: the processor and its
    instruction-set flags (a digest), torch and the vector instructions it dispatches to, numpy
    and numba. Two runs of one configuration agree on machines whose records agree (the same
    code, seed and settings); across others they need not (``reports/notes/bench_notes.md``)."""
    import os
    import platform

    import numpy
    import torch

    cpu, flags = None, ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():  # the first processor's
            key, _, value = line.partition(":")
            if key.strip() == "model name" and cpu is None:
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    cpu = cpu or platform.processor() or platform.machine()
    try:
        import numba

        numba_version = numba.__version__
    except ImportError:
        numba_version = None
    return {
        "cpu": cpu,
        "cpu_flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16] if flags else None,
        "torch": torch.__version__,
        "torch_vector": torch.backends.cpu.get_cpu_capability(),
        "numpy": numpy.__version__,
        "numba": numba_version,
        "cores": os.cpu_count(),
    }


def same_machine(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two machine records (:func:`machine`) agree on what decides a run's rounding
    (False when either is missing or does not know its processor's flags)."""
    if not a or not b or not a.get("cpu_flags_sha256"):
        return False
    return all(a.get(k) == b.get(k) for k in MACHINE_KEYS)


def finished_runs(root: Path) -> Iterator[Path]:
    """The run folders under ``root`` with a ``result.json``, by path."""
    yield from sorted(p.parent for p in root.rglob(RESULT))


@dataclass
class Counts:
    """What :func:`keep` or :func:`restore` did: folders relative to the cache."""

    written: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[str] = field(default_factory=list)  # restore: a run folder in progress there
    ledgers: int = 0

    def line(self, verb: str, where: Path) -> str:
        said = f"{verb} {len(self.written)} run(s) ({where}); {self.unchanged} already there"
        if self.skipped:
            said += f"; {len(self.skipped)} left alone (a run folder in progress)"
        return said


def _merge_ledger(target: Path, entries: dict[str, Any]) -> bool:
    """Add ``entries`` to the ledger at ``target`` (what is there wins); True when it changed."""
    have = _read(target, "an adoption ledger") if target.exists() else {}
    merged = {**entries, **have}
    if merged == have:
        return False
    write_json(target, dict(sorted(merged.items())))
    return True


def keep(root: str | Path, store: str | Path) -> Counts:
    """Record every finished run under the cache ``root`` in ``store`` (a record is rewritten
    only when it changed), and merge each cell's adoption ledger into the store's."""
    root, store = Path(root), Path(store)
    counts = Counts()
    here: dict[str, Any] | None = None
    for run_dir in finished_runs(root):
        rel = run_dir.relative_to(root)
        target = store / rel.parent / f"{rel.name}.json"
        stored = _read(target, "a stored run") if target.exists() else None
        raw = _read(run_dir / RESULT, "a run's result")
        trained_here = not raw.get("restored") and not raw.get("adopted")
        # a finished run folder does not change: the same result (its timing and code version
        # among it) is the same run, so its weights are not hashed again (a record kept
        # without its machine gets it, where the run was trained in this cache)
        if stored is not None and stored.get("result") == _result(run_dir, raw):
            if "machine" in stored or not trained_here:
                counts.unchanged += 1
                continue
            doc = dict(stored)
        else:
            doc = record(run_dir)
        if trained_here:
            here = here or machine()
            doc["machine"] = here
        if stored == doc:
            counts.unchanged += 1
            continue
        write_json(target, doc)
        counts.written.append(rel.as_posix())
    for ledger in sorted(root.rglob(LEDGER)):
        rel = ledger.relative_to(root)
        counts.ledgers += _merge_ledger(store / rel, _read(ledger, "an adoption ledger"))
    return counts


def keep_stored_caches(report: Callable[[str], None] | None = None) -> list[str]:
    """:func:`keep` for every stored cache of this checkout (``runs/<cache>`` with a store,
    :data:`STORED_CACHES`); a line per cache that had runs to write, also given to ``report``.
    A cache that cannot be kept (a record or a weights file that cannot be read) is named in
    its line, not raised: keeping is a side job of whatever trains, and must not end it or hide
    its own error."""
    lines = []
    for cache in STORED_CACHES:
        root = REPO_ROOT / "runs" / cache
        store = store_for(root)
        if store is None or not root.is_dir():
            continue
        try:
            counts = keep(root, store)
        except Exception as exc:  # noqa: BLE001 - reported in the line, and the job goes on
            lines.append(f"runs of {root} not kept: {type(exc).__name__}: {exc}")
        else:
            if not counts.written:
                continue
            lines.append(counts.line("kept", store) + "; commit data/runs")
        if report is not None:
            report(lines[-1])
    return lines


@contextlib.contextmanager
def keeping(every: float, report: Callable[[str], None] | None = None) -> Iterator[None]:
    """While the ``with`` body runs (a report build, a sweep), :func:`keep_stored_caches` every
    ``every`` seconds in a background thread, and once more when the body ends, however it
    ends (a timeout, Ctrl-C, an error). The store then lags the cache by at most ``every``
    seconds, so committing ``data/runs`` during a long build (or recovering the working tree
    of a lost machine) keeps all but the last few runs. Runs in progress (no ``result.json``
    yet) are never recorded."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            keep_stored_caches(report)

    thread = threading.Thread(target=loop, name="runstore-keeping", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        keep_stored_caches(report)


def _check(doc: dict[str, Any], path: Path) -> None:
    if doc.get("format") != FORMAT:
        raise FormatError(
            f"a stored run must have format {FORMAT}, got {doc.get('format')!r}", str(path)
        )
    if not isinstance(doc.get("result"), dict) or not isinstance(doc.get("stages"), dict):
        raise FormatError("a stored run needs 'result' and 'stages' objects", str(path))
    for name, stage in doc["stages"].items():
        if not isinstance(stage, dict) or "/" in name or name in ("", ".", ".."):
            raise FormatError(f"stage {name!r} must be a folder name with an object", str(path))


def restore(store: str | Path, root: str | Path) -> Counts:
    """Write each record of ``store`` back as a run folder of the cache ``root`` where the cache
    has no such folder (a folder there without ``result.json`` is a run in progress: left
    alone), and merge the store's adoption ledgers into the cache's."""
    store, root = Path(store), Path(root)
    counts = Counts()
    if not store.is_dir():
        return counts
    for path in sorted(store.rglob("*.json")):
        rel = path.relative_to(store)
        if path.name == LEDGER:
            counts.ledgers += _merge_ledger(root / rel, _read(path, "an adoption ledger"))
            continue
        run_rel = rel.parent / path.name.removesuffix(".json")
        run_dir = root / run_rel
        if (run_dir / RESULT).exists():
            counts.unchanged += 1
            continue
        if run_dir.exists():
            counts.skipped.append(run_rel.as_posix())
            continue
        doc = _read(path, "a stored run")
        _check(doc, path)
        for name, stage in doc["stages"].items():
            digests = {k: stage.get(k) for k in ("metrics_sha256", "weights_sha256")}
            write_json(run_dir / name / DIGEST, digests)
            for file in _STAGE_FILES:
                if isinstance(stage.get(file.removesuffix(".json")), dict):
                    write_json(run_dir / name / file, stage[file.removesuffix(".json")])
        result = dict(doc["result"])
        if result.get("checkpoint"):
            result["checkpoint"] = str(run_dir / result["checkpoint"])
        result["restored"] = str(path)
        write_json(run_dir / RESULT, result)  # last: the folder counts as finished only now
        counts.written.append(run_rel.as_posix())
    return counts


def restore_for(root: str | Path) -> str | None:
    """:func:`restore` into the run cache ``root`` from its store, if it has one; a line saying
    what came back (None when nothing did)."""
    store = store_for(root)
    if store is None:
        return None
    counts = restore(store, root)
    if not counts.written:
        return None
    return counts.line("restored", store) + " (doppler-lab runs status)"


def status(root: str | Path, store: str | Path) -> dict[str, Any]:
    """How a cache and its store stand: runs finished here, stored, to keep (finished here, not
    stored), to restore (stored, not here), by code version."""
    root, store = Path(root), Path(store)
    here = {d.relative_to(root).as_posix() for d in finished_runs(root)} if root.is_dir() else set()
    stored: dict[str, str] = {}
    if store.is_dir():
        for path in store.rglob("*.json"):
            if path.name == LEDGER:
                continue
            rel = path.relative_to(store)
            doc = _read(path, "a stored run")
            stored[(rel.parent / path.name.removesuffix(".json")).as_posix()] = str(
                (doc.get("result") or {}).get("code_version", "?")
            )
    by_version: dict[str, int] = {}
    for version in stored.values():
        by_version[version] = by_version.get(version, 0) + 1
    return {
        "cache": str(root),
        "store": str(store),
        "finished_here": len(here),
        "stored": len(stored),
        "to_keep": sorted(here - stored.keys()),
        "to_restore": sorted(stored.keys() - here),
        "stored_by_version": dict(sorted(by_version.items())),
    }


__all__ = [
    "STORED_CACHES",
    "Counts",
    "checkpoint_in_run",
    "keep",
    "keep_stored_caches",
    "keeping",
    "machine",
    "record",
    "restore",
    "restore_for",
    "same_machine",
    "stage_digest",
    "stage_dirs",
    "status",
    "store_for",
    "weights_digest",
]

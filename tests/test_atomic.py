"""Atomic writes (:mod:`doppler_lab.house.atomic`): a failed write leaves the old file and says, in one
line, which file and why; links are replaced, never written through; every writer uses it."""

from __future__ import annotations

import ast
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from doppler_lab.cli import main
from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house import atomic
from doppler_lab.house.atomic import atomic_write, atomic_writer
from doppler_lab.house.errors import DopplerLabError, WriteError
from doppler_lab.house.jsonutil import write_json
from doppler_lab.io.documents import save_cluster, save_graph, save_placement, save_trace
from doppler_lab.ir.placement import Placement
from doppler_lab.workloads import build_from_spec

REPO = Path(__file__).resolve().parents[1]


def _fail_replace(code: int):
    def replace(src, dst, *a, **k):
        raise OSError(code, os.strerror(code), str(dst))

    return replace


def _tmp_left(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_write_replaces_and_keeps_no_temporary(tmp_path):
    p = tmp_path / "sub" / "a.json"
    atomic_write(p, "one")
    atomic_write(p, b"two")
    assert p.read_text() == "two"
    assert _tmp_left(p.parent) == []


def test_new_file_mode_follows_the_umask_and_a_replaced_file_keeps_its_mode(tmp_path):
    p = tmp_path / "a.txt"
    atomic_write(p, "x")
    assert p.stat().st_mode & 0o777 == 0o666 & ~atomic._UMASK
    p.chmod(0o640)
    atomic_write(p, "y")
    assert p.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize(
    "code, words",
    [
        (errno.ENOSPC, "no space left on device"),
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "permission denied"),
    ],
)
def test_failed_replace_keeps_the_old_file_and_says_why_in_one_line(
    tmp_path, monkeypatch, code, words
):
    p = tmp_path / "out.json"
    p.write_text("old")
    monkeypatch.setattr(atomic.os, "replace", _fail_replace(code))
    with pytest.raises(WriteError) as info:
        write_json(p, {"new": 1})
    msg = str(info.value)
    assert "\n" not in msg and str(p) in msg and words in msg.lower()
    assert errno.errorcode[code] in msg
    assert info.value.errno == code and isinstance(info.value, OSError | DopplerLabError)
    assert p.read_text() == "old"
    assert _tmp_left(tmp_path) == []


def test_failed_write_midway_keeps_the_old_file(tmp_path, monkeypatch):
    p = tmp_path / "ckpt.bin"
    p.write_bytes(b"old")

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(WriteError, match="no space left"):
        with atomic_writer(p) as fh:
            Full(fh).write(b"new")
    assert p.read_bytes() == b"old"
    assert _tmp_left(tmp_path) == []


def test_read_only_folder_cannot_make_the_temporary(tmp_path, monkeypatch):
    def mkstemp(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(atomic.tempfile, "mkstemp", mkstemp)
    with pytest.raises(WriteError, match="read-only file system"):
        atomic_write(tmp_path / "x.json", "{}")


def test_an_error_of_the_caller_leaves_the_old_file(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_writer(p, "w") as fh:
            fh.write("half")
            raise RuntimeError("boom")
    assert p.read_text() == "old"
    assert _tmp_left(tmp_path) == []


def test_a_link_is_replaced_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    atomic_write(link, "{}")
    assert victim.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "{}"


def test_a_folder_as_target_is_one_line(tmp_path):
    with pytest.raises(WriteError, match="it is a folder"):
        atomic_write(tmp_path, "x")


def test_every_file_writer_goes_through_atomic(tmp_path, monkeypatch):
    """The package's save functions, with a failing rename, all leave the old file."""
    g = build_from_spec("chainmm")
    c = make_cluster("p100x4")
    pl = Placement(np.zeros(g.num_nodes, dtype=np.int64))
    from doppler_lab.timing.sim import simulate

    trace = simulate(g, c, pl)
    writers = {
        "graph.json": lambda p: save_graph(g, p),
        "cluster.json": lambda p: save_cluster(c, p),
        "placement.json": lambda p: save_placement(pl, p, g, 4),
        "trace.json": lambda p: save_trace(trace, p),
    }
    for name in writers:
        (tmp_path / name).write_text("old")
    monkeypatch.setattr(atomic.os, "replace", _fail_replace(errno.ENOSPC))
    for name, write in writers.items():
        with pytest.raises(WriteError, match=name):
            write(tmp_path / name)
        assert (tmp_path / name).read_text() == "old"


def test_the_checkpoint_writer_is_atomic(tmp_path, monkeypatch):
    from doppler_lab.policies.checkpoint import make_policy, save_checkpoint
    from doppler_lab.policies.policy_config import PolicyConfig

    policy = make_policy(PolicyConfig(), 2)
    p = tmp_path / "last.pt"
    p.write_bytes(b"old")
    monkeypatch.setattr(atomic.os, "replace", _fail_replace(errno.EROFS))
    with pytest.raises(WriteError, match="last.pt: read-only"):
        save_checkpoint(p, policy)
    assert p.read_bytes() == b"old"


#: the raw writes that stay, each with its reason: (module under doppler_lab/, what) -> why
RAW_WRITES_ALLOWED = {
    ("train/metrics.py", "open 'a'"): "metrics.csv, a journal appended row by row (resume "
    "drops the rows after the last checkpoint and rewrites the file atomically)",
    ("lab/bench/search_probe.py", "open 'a'"): "the probe's JSON lines, appended run by run",
    ("io/datasets.py", "tempfile.mkdtemp"): "the download staging folder; checked files are "
    "then copied in with atomic_copy",
    ("io/datasets.py", "open 'wb'"): "a file of that staging folder",
    ("house/runfolder.py", "os.open"): "the run folder's lock file, written in place under "
    "its lock",
    ("cli.py", "os.open"): "os.devnull",
    ("placers/partition.py", "os.open"): "os.devnull",
    ("lab/reporting/notebook_runs.py", "execute_notebook"): "papermill writes the executed copy "
    "after every cell (a failed run's cells stay readable); it records its own path in the "
    "notebook, so a temporary name would show there",
    ("executor/dist.py", "tempfile.mkdtemp"): "the worker processes' rendezvous folder",
    ("lab/bench/recheck.py", "tempfile.mkdtemp"): "a recheck's scratch folder (git worktrees "
    "of older commits and the runs they train), removed when the recheck ends",
    ("lab/reporting/notebook_runs.py", "tempfile.mkdtemp"): "a report kernel's private folder "
    "for its IPC sockets, removed when the kernel shuts down",
}

# calls that write the file named by one of their arguments: name -> that argument's index
_MODULE_WRITERS = {
    "torch.save": 1,
    "np.save": 0,
    "np.savez": 0,
    "np.savez_compressed": 0,
    "np.savetxt": 0,
    "numpy.save": 0,
    "pickle.dump": 1,
    "json.dump": 1,
    "nbformat.write": 1,
}
_METHOD_WRITERS = {
    "write_text": None,
    "write_bytes": None,
    "write_html": 0,
    "write_image": 0,
    "write_json": 0,
    "savefig": 0,
    "to_csv": 0,
    "to_json": 0,
    "to_parquet": 0,
    "to_pickle": 0,
    "to_excel": 0,
    "to_feather": 0,
    "to_hdf": 0,
    "touch": None,
    "symlink_to": None,
    "hardlink_to": None,
    "execute_notebook": None,
}
_ALWAYS = {
    "os.replace",
    "os.rename",
    "os.link",
    "os.symlink",
    "os.fdopen",
    "shutil.copy",
    "shutil.copy2",
    "shutil.copyfile",
    "shutil.copytree",
    "shutil.move",
    "tempfile.mkstemp",
    "tempfile.mkdtemp",
    "tempfile.NamedTemporaryFile",
}
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC")


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _mode(call: ast.Call, index: int) -> str | None:
    """The mode of an ``open`` call: its constant text, ``"?"`` when not a constant, None when
    not given (read)."""
    arg = call.args[index] if len(call.args) > index else None
    for kw in call.keywords:
        if kw.arg == "mode":
            arg = kw.value
    if arg is None:
        return None
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "?"


class _RawWrites(ast.NodeVisitor):
    """Every call of a module that writes a file other than through
    :mod:`doppler_lab.house.atomic`: ``(line, what)``. A writer handed a file object of
    ``with atomic_writer(...) as fh`` (or ``sys.stdout``/``sys.stderr``) writes through it."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self.handles: list[str] = []

    def visit_With(self, node: ast.With) -> None:
        names = [
            item.optional_vars.id
            for item in node.items
            if isinstance(item.context_expr, ast.Call)
            and _dotted(item.context_expr.func).split(".")[-1] == "atomic_writer"
            and isinstance(item.optional_vars, ast.Name)
        ]
        self.handles += names
        self.generic_visit(node)
        del self.handles[len(self.handles) - len(names) :]

    def _through_atomic(self, call: ast.Call, index: int | None) -> bool:
        if index is None:
            return False
        if len(call.args) > index:
            arg = call.args[index]
        else:  # a file by keyword, or none (``frame.to_csv()`` returns the text)
            given = [kw.value for kw in call.keywords if kw.arg in ("f", "file", "path_or_buf")]
            if not given:
                return True
            arg = given[0]
        return (isinstance(arg, ast.Name) and arg.id in self.handles) or _dotted(arg) in (
            "sys.stdout",
            "sys.stderr",
        )

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        what = None
        if name in ("open", "io.open"):
            mode = _mode(node, 1)
            if mode is not None and (mode == "?" or set(mode) & set("wax+")):
                what = f"open {mode!r}"
        elif name == "os.open":
            flags = ast.dump(node.args[1]) if len(node.args) > 1 else ""
            if any(f in flags for f in _WRITE_FLAGS):
                what = "os.open"
        elif name in _ALWAYS:
            what = name
        elif name in _MODULE_WRITERS:
            if not self._through_atomic(node, _MODULE_WRITERS[name]):
                what = name
        elif isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr == "open":  # Path.open(mode)
                mode = _mode(node, 0)
                if mode is not None and mode != "?" and set(mode) & set("wax+"):
                    what = f"open {mode!r}"
            elif attr in _METHOD_WRITERS and not self._through_atomic(node, _METHOD_WRITERS[attr]):
                what = attr
        if what is not None:
            self.found.append((node.lineno, what))
        self.generic_visit(node)


def raw_writes(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of each write in ``source`` that bypasses the atomic writers."""
    visitor = _RawWrites()
    visitor.visit(ast.parse(source))
    return visitor.found


def test_the_guard_sees_raw_writes():
    src = """
import json, shutil, torch
from pathlib import Path
def f(p, doc, fig, frame):
    Path(p).write_text("x")
    with open(p, "w") as fh:
        json.dump(doc, fh)
    torch.save(doc, p)
    fig.write_html(p)
    frame.to_csv(p)
    shutil.copy(p, p)
    with atomic_writer(p) as fh:
        torch.save(doc, fh)
        fig.write_html(fh)
    json.dump(doc, sys.stdout)
    frame.to_csv()
    with open(p) as fh:
        fh.read()
"""
    assert [w for _, w in raw_writes(src)] == [
        "write_text",
        "open 'w'",
        "json.dump",
        "torch.save",
        "write_html",
        "to_csv",
        "shutil.copy",
    ]


def test_no_writer_bypasses_atomic():
    """An AST guard over the whole package: every file is written through
    :mod:`doppler_lab.house.atomic` (``atomic_write``, ``atomic_writer``, ``atomic_copy``, or
    what is built on them: ``write_json``, ``HtmlReport.write``, the save functions), but for
    the raw writes of :data:`RAW_WRITES_ALLOWED`, each with its reason; an allowance no longer
    used fails too."""
    root = REPO / "doppler_lab"
    bad, used = [], set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "house/atomic.py":
            continue
        for line, what in raw_writes(path.read_text()):
            if (rel, what) in RAW_WRITES_ALLOWED:
                used.add((rel, what))
            else:
                bad.append(f"doppler_lab/{rel}:{line}: {what}")
    assert bad == []
    assert sorted(set(RAW_WRITES_ALLOWED) - used) == []


def test_cli_turns_a_failed_write_into_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    out = tmp_path / "chain.json"
    out.write_text("old")
    monkeypatch.setattr(atomic.os, "replace", _fail_replace(errno.ENOSPC))
    assert main(["workloads", "build", "chainmm", "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(out) in err and "no space left" in err
    assert out.read_text() == "old"


def test_place_out_failure_keeps_the_placement_on_stdout(tmp_path, monkeypatch, capsys):
    out = tmp_path / "p.json"
    monkeypatch.setattr(atomic.os, "replace", _fail_replace(errno.ENOSPC))
    code = main(["place", "chainmm", "--placer", "round-robin", "--out", str(out), "--no-progress"])
    assert code == 2
    cap = capsys.readouterr()
    assert cap.err.strip().count("\n") == 0 and "printed to stdout" in cap.err
    doc = json.loads(cap.out.strip().splitlines()[-1])
    assert doc["format"] == "doppler_lab.placement" and len(doc["device"]) > 0
    assert not out.exists()


def test_broken_pipe_in_a_command_ends_quietly(monkeypatch, capsys):
    from doppler_lab.commands import workloads

    def run(args):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(workloads, "run", run)
    assert main(["workloads", "list"]) == 0
    assert capsys.readouterr().err == ""


def test_broken_pipe_of_a_real_reader_ends_quietly():
    """``doppler-lab workloads list --json | head -c 0``: the reader is gone before the first
    write; no traceback, exit code 0."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "doppler_lab.cli", "workloads", "list", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    proc.stdout.close()  # the reader goes away at once
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err

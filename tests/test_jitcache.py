"""numba's cache lives in a folder per version of the compiled kernels' sources
(:mod:`doppler_lab.house.jitcache`): an edit to a callee in another file cannot leave a
caller's stale machine code in use."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from doppler_lab.house import jitcache

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return out.stdout.strip()


def test_digest_follows_every_kernel_source_and_nothing_else(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(jitcache.PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    base = jitcache.jit_sources_digest(pkg)
    assert base == jitcache.jit_sources_digest(jitcache.PACKAGE_DIR)
    rules = pkg / "hardware" / "rules.py"  # a callee of the simulator's kernels
    rules.write_text(rules.read_text() + "\n# a comment\n")
    assert jitcache.jit_sources_digest(pkg) != base
    rules.write_text(rules.read_text().removesuffix("\n# a comment\n"))
    assert jitcache.jit_sources_digest(pkg) == base
    plain = pkg / "house" / "errors.py"  # no kernel in it
    plain.write_text(plain.read_text() + "\n# a comment\n")
    assert jitcache.jit_sources_digest(pkg) == base


def test_kernels_cache_in_the_versions_folder(tmp_path):
    code = (
        "import os, doppler_lab\n"
        "from doppler_lab.workloads import build\n"
        "build('chainmm', scale=0.01).topo_order\n"  # compiles (and caches) ir.graph's _kahn
        "print(os.environ['NUMBA_CACHE_DIR'])\n"
    )
    clean = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    folder = Path(out.stdout.strip().splitlines()[-1])
    digest = jitcache.jit_sources_digest()
    assert folder == tmp_path / "doppler_lab" / "numba" / f"doppler_lab-{digest}"
    assert any(folder.rglob("*.nbi")), "no kernel was cached in the version's folder"


def test_a_given_root_is_kept_and_nesting_is_idempotent(tmp_path):
    code = "import os, doppler_lab; print(os.environ['NUMBA_CACHE_DIR'])"
    first = _python(code, {"NUMBA_CACHE_DIR": str(tmp_path)})
    assert Path(first).parent == tmp_path and Path(first).name.startswith("doppler_lab-")
    # a child process inherits the folder and stays in it
    assert _python(code, {"NUMBA_CACHE_DIR": first}) == first


def test_old_versions_are_pruned_and_recent_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    old, recent = tmp_path / "doppler_lab-000000000000", tmp_path / "doppler_lab-111111111111"
    other = tmp_path / "someone-else"
    for p in (old, recent, other):
        p.mkdir()
    past = time.time() - (jitcache.KEEP_DAYS + 1) * 86400
    os.utime(old, (past, past))
    os.utime(other, (past, past))
    try:
        folder = jitcache.configure()
    finally:
        monkeypatch.undo()
        jitcache.configure()  # back to this process's own folder
    assert folder is not None and folder.parent == tmp_path
    assert not old.exists() and recent.exists() and other.exists()

"""Code versions: what changes them, and the caches and reports keyed by them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from doppler_lab.house import codeversion
from doppler_lab.house.codeversion import code_version, strip_comments_and_docstrings, versioned_key
from doppler_lab.house.errors import ConfigError
from doppler_lab.house.jsonutil import config_key
from doppler_lab.house.paths import REPO_ROOT
from doppler_lab.lab.bench._report import read_report, write_report

SOURCE = '''"""Module docstring."""

import math  # a comment


def area(r):
    """The area."""
    return math.pi * r * r  # pi r^2
'''


def _package(tmp_path: Path, source: str, name: str = "pkg") -> Path:
    pkg = tmp_path / name
    (pkg / "commands").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "geometry.py").write_text(source)
    (pkg / "commands" / "cli_part.py").write_text("print('a command')\n")
    return pkg


def test_strip_keeps_code_and_drops_comments_and_docstrings():
    assert strip_comments_and_docstrings(SOURCE) == (
        "import math\ndef area(r):\n    return math.pi * r * r"
    )
    assert strip_comments_and_docstrings("x = '# not a comment'\n") == "x = '# not a comment'"
    assert strip_comments_and_docstrings("def broken(:\n") == "def broken(:\n"


def test_version_follows_code_not_comments_docstrings_or_excluded_files(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    base = code_version(_package(tmp_path / "a", SOURCE))
    reworded = SOURCE.replace("The area.", "Area of a disc.").replace("# a comment", "# other")
    assert code_version(_package(tmp_path / "b", reworded)) == base
    changed = SOURCE.replace("r * r", "r ** 2")
    assert code_version(_package(tmp_path / "c", changed)) != base
    pkg = _package(tmp_path / "d", SOURCE)
    (pkg / "commands" / "cli_part.py").write_text("print('another command')\n")
    assert code_version(pkg) == base  # commands/ cannot change a computed number
    assert len(base) == 12 and int(base, 16) >= 0


def test_stripped_digests_are_remembered_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = code_version(_package(tmp_path / "a", SOURCE))
    assert (tmp_path / "cache" / "doppler_lab" / "codeversion.json").exists()

    def fail(source: str) -> str:
        raise AssertionError("stripped again")

    monkeypatch.setattr(codeversion, "strip_comments_and_docstrings", fail)
    assert code_version(_package(tmp_path / "b", SOURCE)) == first  # same bytes: from the cache


def test_versioned_key_is_config_key_with_the_version(monkeypatch):
    key = versioned_key({"lr": 0.03}, 5)
    assert key == versioned_key({"lr": 0.03}, 5) != config_key({"lr": 0.03}, 5)
    monkeypatch.setattr(codeversion, "code_version", lambda: "otherversion")
    assert versioned_key({"lr": 0.03}, 5) != key


def test_reports_carry_the_version_and_old_reports_still_read(tmp_path):
    rec = write_report(tmp_path, "toy", "Toy", {"Rows": ([{"a": 1.0}], None)}, command="x")
    assert rec["code_version"] == code_version()
    md = (tmp_path / "toy.md").read_text()
    assert f"Code version: `{code_version()}`" in md
    assert read_report(tmp_path / "toy.json")["code_version"] == code_version()
    shipped = sorted((REPO_ROOT / "reports" / "bench").glob("*.json"))
    for path in shipped:
        record = read_report(path)
        assert record["benchmark"] == path.stem and "code_version" in record
    (tmp_path / "bad.json").write_text(json.dumps([1, 2]))
    with pytest.raises(ConfigError, match="no 'benchmark' field"):
        read_report(tmp_path / "bad.json")


def test_bench_policy_runs_are_reused_only_by_the_same_code(tmp_path, monkeypatch):
    from doppler_lab.lab.bench import policy as bench

    cfg = bench.PolicyBenchConfig(
        paper_graphs=(),
        workloads=("chainmm:matrices=3,scale=0.01",),
        methods=("doppler",),
        ablations=(),
        design_ablations=(),
        design_graphs=(),
        episodes=3,
        imitation_episodes=1,
        samples=1,
        jobs=1,
        policy={"hidden": 8, "mp_steps": 1},
    )
    (case,), _ = bench._cases(cfg)
    first = bench.run_case(cfg, case, "doppler", 0, tmp_path)
    assert first["code_version"] == code_version()
    assert bench.run_case(cfg, case, "doppler", 0, tmp_path) == first  # cached
    assert len(list(tmp_path.rglob("result.json"))) == 1
    monkeypatch.setattr(codeversion, "code_version", lambda: "changedcode0")
    bench.run_case(cfg, case, "doppler", 0, tmp_path)
    assert len(list(tmp_path.rglob("result.json"))) == 2  # trained anew beside the old run


def test_every_excluded_path_exists() -> None:
    """A moved module must move in EXCLUDED too, or it would silently start to count."""
    from doppler_lab.house.codeversion import EXCLUDED, PACKAGE_DIR

    missing = [e for e in EXCLUDED if not (PACKAGE_DIR / e.rstrip("/")).exists()]
    assert missing == []

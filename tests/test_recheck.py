"""Adoption checks failed by the machine, not the code (``lab/bench/recheck.py``): the older code
version's commit found in the history, its check seed trained again on this machine, and the
cell adopted where that run equals the current code's check run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from sweeps import TINY_SWEEP as TINY

from doppler_lab.house import codeversion, runstore
from doppler_lab.lab.bench import adopt, recheck
from doppler_lab.lab.bench import policy as bench_policy
from doppler_lab.lab.bench.policy import PolicyBenchConfig, _cases, case_run_dir, run_case


def _tasks(root: Path, seeds: int = 2):
    (case,) = _cases(TINY)[0]
    return [(TINY, case, "doppler", s, root) for s in range(seeds)]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_the_commit_of_a_code_version_is_found_in_the_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo, pkg = tmp_path / "repo", tmp_path / "repo" / "pkg"
    (pkg / "house").mkdir(parents=True)
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "config", "user.name", "t")

    def commit(text: str, comment: str = "") -> tuple[str, str]:
        (pkg / "core.py").write_text(f"{comment}\nX = {text}\n")
        (pkg / "cli.py").write_text(f"print({text!r})\n")  # excluded: never in a version
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", text)
        return _git(repo, "rev-parse", "HEAD"), codeversion._digest.__wrapped__(pkg)

    first, v1 = commit("1")
    second, v2 = commit("2")
    third, v3 = commit("2", comment="# a comment: the same version")
    assert v1 != v2 == v3
    assert codeversion.commit_of_version(v1, repo, "pkg") == first
    assert codeversion.commit_of_version(v2, repo, "pkg") == third  # the newest of its commits
    assert codeversion.commit_of_version("0" * 12, repo, "pkg") is None
    assert codeversion.commit_of_version(v1, tmp_path / "no-repo", "pkg") is None
    # the package's own history gives back the version of HEAD's sources
    here = codeversion.PACKAGE_DIR.parent
    if (here / ".git").exists() and not _git(here, "status", "--porcelain", "--", "doppler_lab"):
        assert codeversion.commit_of_version(codeversion.code_version()) is not None


def test_settings_are_found_by_the_run_folders_name(tmp_path):
    graph = "chainmm:matrices=3,scale=0.01"
    cfg = PolicyBenchConfig.of_graphs(
        [graph], methods=["sel-only"], episodes=4000, imitation_episodes=400, learner="sim"
    )
    (case,) = _cases(cfg)[0]
    run = case_run_dir(cfg, case, "sel-only", 3, tmp_path)
    run.mkdir(parents=True)
    result = {"graph": case.name, "method": "sel-only", "seed": 3, "episodes": 4000}
    (run / "result.json").write_text(json.dumps({**result, "rl_episodes": 3600}))
    found = recheck.settings_for(run, None)
    assert found is not None
    assert (found["episodes"], found["imitation_episodes"], found["learner"]) == (4000, 400, "sim")
    other = run.parent / "seed3-00000000"  # a configuration no candidate has
    other.mkdir()
    (other / "result.json").write_text((run / "result.json").read_text())
    assert recheck.settings_for(other, None) is None


@pytest.fixture
def failed_by_the_machine(tmp_path, version, monkeypatch):
    """A run cache whose check of version aaaa failed under bbbb because aaaa's runs came from
    another machine (their stored weights differ), and a store that holds them."""
    version("aaaaaaaaaaaa")
    root, store, fresh = tmp_path / "runs", tmp_path / "store", tmp_path / "fresh"
    for task in _tasks(root):
        run_case(*task)
    runstore.keep(root, store)
    for path in store.rglob("seed*.json"):  # trained elsewhere: another rounding
        doc = json.loads(path.read_text())
        assert doc["machine"] == runstore.machine()  # kept here, where it was trained
        doc["stages"]["2_sim"]["weights_sha256"] = "0" * 64
        doc["machine"] = {**doc["machine"], "cpu_flags_sha256": "another-cpu"}
        path.write_text(json.dumps(doc))
    runstore.restore(store, fresh)
    monkeypatch.setattr(runstore, "store_for", lambda r: store if Path(r) == fresh else None)
    version("bbbbbbbbbbbb")
    notes = bench_policy.verify_adoptions(_tasks(fresh))
    assert "did not reproduce" in notes[0]
    monkeypatch.setattr(codeversion, "commit_of_version", lambda v, repo=None: "c" * 40)
    monkeypatch.setattr(recheck, "settings_for", lambda new_dir, paper: {"tiny": True})
    return fresh, store


def _old_code(version, seed_offset: int = 0):
    """A stand-in for the older commit's code: this code, reporting version aaaa."""

    def run(commit, old_version, args, workdir, repo):
        assert (commit, old_version, args["expect"].startswith("seed0-")) == (
            "c" * 40,
            "aaaaaaaaaaaa",
            True,
        )
        (case,) = _cases(TINY)[0]
        version(old_version)
        try:
            seed, where = args["seed"] + seed_offset, Path(args["root"])
            run_case(TINY, case, "doppler", seed, where, adopt_older=False)
            return case_run_dir(TINY, case, "doppler", seed, where)
        finally:
            version("bbbbbbbbbbbb")

    return run


def test_a_check_failed_by_the_machine_is_adopted_after_the_old_code_runs_here(
    failed_by_the_machine, version, trained
):
    fresh, store = failed_by_the_machine
    (check,) = recheck.failed_checks(fresh)
    assert check.pair == "aaaaaaaaaaaa->bbbbbbbbbbbb"
    cell = check.cell.relative_to(fresh).as_posix()
    assert recheck.failed_checks(fresh, {cell}) == [check]
    assert recheck.failed_checks(fresh, {"another_graph/doppler"}) == []  # a sweep's own cells
    assert recheck.recheck(fresh, run_old=lambda *a: pytest.fail("no run"), cells=set()) == []
    lines: list[str] = []
    (row,) = recheck.recheck(fresh, run_old=_old_code(version), report=lines.append)
    assert row["verdict"] == "identical" and "another machine" in lines[0]
    for cell in (check.cell, store / check.cell.relative_to(fresh)):
        entry = adopt.ledger(cell)[check.pair]
        assert entry["identical"] is True and entry["recheck"]["commit"] == "c" * 40
        assert "2_sim/policy.pt weights differ" in entry["recheck"]["stored_run_differences"]
    assert adopt.verdict(check.cell, "aaaaaaaaaaaa") is True
    assert recheck.failed_checks(fresh) == []
    # the sweep now adopts seed 1 (the stored run) and trains nothing
    del trained[:]
    sweep = bench_policy.adopted_sweep(
        _tasks(fresh), bench_policy.case_runs(TINY, [t[1:4] for t in _tasks(fresh)], fresh), "s"
    )[0].done()
    assert trained == [] and sweep[1]["adopted"]["from"] == "aaaaaaaaaaaa"
    assert recheck.rechecked_cells(fresh) == {check.cell.relative_to(fresh).as_posix()}
    assert recheck.summary_line(sweep, fresh).startswith(
        "1 of the adopted runs lie in 1 cell(s) whose check first failed"
    )
    assert recheck.summary_line(sweep[:1], fresh) == ""  # seed 0: this code's own run


def test_a_recheck_that_differs_keeps_the_check_failed_and_is_not_repeated(
    failed_by_the_machine, version
):
    fresh, _ = failed_by_the_machine
    (row,) = recheck.recheck(fresh, run_old=_old_code(version, seed_offset=1))
    assert row["verdict"] == "differs" and "makespan" in row["why"]
    (cell,) = {p.parent for p in fresh.rglob(adopt.LEDGER)}
    entry = adopt.ledger(cell)["aaaaaaaaaaaa->bbbbbbbbbbbb"]
    assert entry["identical"] is False and entry["recheck"]["identical"] is False
    assert recheck.failed_checks(fresh) == []
    assert adopt.verdict(cell, "aaaaaaaaaaaa") is False


def test_a_check_that_cannot_be_rechecked_says_why(failed_by_the_machine, monkeypatch):
    fresh, _ = failed_by_the_machine
    monkeypatch.setattr(codeversion, "commit_of_version", lambda v, repo=None: None)
    (row,) = recheck.recheck(fresh, run_old=lambda *a: pytest.fail("nothing to run"))
    assert row["verdict"] == "not rechecked" and "no commit of" in row["why"]
    monkeypatch.setattr(codeversion, "commit_of_version", lambda v, repo=None: "c" * 40)

    def broken(*args):
        raise RuntimeError("the code of cccccccccccc failed: ImportError")

    (row,) = recheck.recheck(fresh, run_old=broken)
    assert row == {
        **row,
        "verdict": "not rechecked",
        "why": "the code of cccccccccccc failed: ImportError",
    }
    assert len(recheck.failed_checks(fresh)) == 1  # still to recheck


def test_the_runs_recheck_command(failed_by_the_machine, version, monkeypatch, capsys):
    from doppler_lab.cli import main
    from doppler_lab.house import paths

    fresh, store = failed_by_the_machine
    cache = fresh.parent / "repo" / "runs" / "bench_policy"
    cache.parent.mkdir(parents=True)
    cache.symlink_to(fresh)
    monkeypatch.setattr(paths, "REPO_ROOT", fresh.parent / "repo")
    monkeypatch.setattr(
        runstore, "store_for", lambda r: store if Path(r) in (fresh, cache) else None
    )
    real = recheck.recheck
    monkeypatch.setattr(
        recheck, "recheck", lambda root, **kw: real(root, run_old=_old_code(version), **kw)
    )
    assert main(["runs", "recheck", "--jobs", "0"]) == 2
    assert "--jobs must be >= 1, got 0" in capsys.readouterr().err
    assert main(["runs", "recheck", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "1 failed adoption check(s) of code version bbbbbbbbbbbb" in out
    assert "doppler aaaaaaaaaaaa->bbbbbbbbbbbb: identical" in out
    assert main(["runs", "recheck", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rechecks"] == []


def test_a_page_sweep_rechecks_a_failed_check_before_it_trains(
    failed_by_the_machine, version, trained, capsys
):
    fresh, _ = failed_by_the_machine
    ledger = next(fresh.rglob(adopt.LEDGER))
    ledger.unlink()  # no check yet: the page's sweep runs it, and it fails (another machine)
    del trained[:]
    cfg = TINY.__class__(**{**TINY.__dict__, "seeds": 2})
    cells = recheck.seed_cells_rechecked(cfg, fresh, run_old=_old_code(version))
    out = capsys.readouterr().out
    assert "did not reproduce" in out and ": identical (the code of cccccccccccc" in out
    # one training: the older code's seed 0 (the stand-in); this code compares its finished
    # seed 0 and adopts seed 1
    assert trained == [0]
    assert sorted(r["seed"] for r in cells.runs) == [0, 1]
    assert next(r for r in cells.runs if r["seed"] == 1)["adopted"]["from"] == "aaaaaaaaaaaa"


def test_a_check_failed_against_a_run_of_this_kind_of_machine_is_the_codes(
    failed_by_the_machine,
):
    fresh, store = failed_by_the_machine
    for path in store.rglob("seed0-*.json"):  # the stored run came from a machine like this
        doc = json.loads(path.read_text())
        doc["machine"] = runstore.machine()
        path.write_text(json.dumps(doc))
    (row,) = recheck.recheck(fresh, run_old=lambda *a: pytest.fail("nothing to run"))
    assert row["verdict"] == "not rechecked" and "the code differs" in row["why"]
    (cell,) = {p.parent for p in fresh.rglob(adopt.LEDGER)}
    entry = adopt.ledger(cell)["aaaaaaaaaaaa->bbbbbbbbbbbb"]
    assert entry["identical"] is False and entry["recheck"]["same_machine"] is True
    assert recheck.failed_checks(fresh) == []  # not asked again

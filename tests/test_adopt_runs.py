"""Cached training runs carried over a code change (``lab/bench/adopt.py``): an older code
version's runs are returned only in cells where the current code re-ran a check seed and
reproduced it exactly; a cell whose check differs is retrained, and the verdict is kept."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from sweeps import TINY_SWEEP as TINY

from doppler_lab.lab.bench import adopt
from doppler_lab.lab.bench import policy as bench_policy
from doppler_lab.lab.bench.policy import (
    _cases,
    case_run_dir,
    run_case,
    verify_adoptions,
)


def _tasks(root: Path):
    (case,) = _cases(TINY)[0]
    return [(TINY, case, "doppler", s, root) for s in range(3)]


def _sweep(tasks):
    notes = verify_adoptions(tasks)
    return notes, [run_case(*t) for t in tasks]


def test_a_reproduced_cell_is_adopted_after_one_check_seed(tmp_path, version, trained):
    root = tmp_path / "runs"
    version("aaaaaaaaaaaa")
    before = [run_case(*t) for t in _tasks(root)]
    assert trained == [0, 1, 2]
    version("bbbbbbbbbbbb")
    notes, after = _sweep(_tasks(root))
    assert trained == [0, 1, 2, 0]  # the check seed only
    assert len(notes) == 1 and "adopted (seed 0 reproduced exactly)" in notes[0]
    assert after[0]["code_version"] == "bbbbbbbbbbbb" and "adopted" not in after[0]
    for old, new in zip(before[1:], after[1:], strict=True):
        assert new["adopted"] == {"from": "aaaaaaaaaaaa", "under": "bbbbbbbbbbbb", "check_seed": 0}
        assert {k: new[k] for k in adopt.RESULT_FIELDS} == {k: old[k] for k in adopt.RESULT_FIELDS}
        assert Path(new["checkpoint"]).exists()
    for old, new in zip(before, after, strict=True):
        assert new["makespan"] == old["makespan"]
    # a second sweep checks nothing and trains nothing
    notes, again = _sweep(_tasks(root))
    assert notes == [] and trained == [0, 1, 2, 0] and again == after


def test_a_cell_that_does_not_reproduce_is_retrained_and_remembered(
    tmp_path, version, trained, monkeypatch
):
    root = tmp_path / "runs"
    version("aaaaaaaaaaaa")
    [run_case(*t) for t in _tasks(root)]
    version("cccccccccccc")
    real = bench_policy.best_of_rollouts

    def changed(*a, **k):  # new code that evaluates differently: same config, other numbers
        res = real(*a, **k)
        return dataclasses.replace(res, cost=res.cost + 1.0)

    monkeypatch.setattr(bench_policy, "best_of_rollouts", changed)
    notes, after = _sweep(_tasks(root))
    assert len(notes) == 1 and "retrained, seed 0 did not reproduce" in notes[0]
    assert "makespan" in notes[0]
    assert trained == [0, 1, 2, 0, 1, 2] and not any("adopted" in r for r in after)
    cell = case_run_dir(*_tasks(root)[0]).parent
    (entry,) = adopt.ledger(cell).values()
    assert entry["identical"] is False and entry["check_seed"] == 0
    assert adopt.verdict(cell, "aaaaaaaaaaaa") is False


def test_equal_versions_chain_so_one_check_serves_them(tmp_path, version, trained):
    root = tmp_path / "runs"
    version("aaaaaaaaaaaa")
    [run_case(*t) for t in _tasks(root)]
    version("bbbbbbbbbbbb")
    _sweep(_tasks(root))  # b re-ran seed 0: a == b
    version("dddddddddddd")
    checks = adopt.checks_needed(
        (t, t[3], lambda v, t=t: case_run_dir(*t, version=v)) for t in _tasks(root)
    )
    # a and b are one class: one check, on b's finished seed 0 (a's seed 0 too; the lowest)
    assert len(checks) == 1 and checks[0][1] == 0
    notes, after = _sweep(_tasks(root))
    assert len(notes) == 1 and trained == [0, 1, 2, 0, 0]
    assert [r.get("adopted", {}).get("from") for r in after] == [
        None,
        "aaaaaaaaaaaa",
        "aaaaaaaaaaaa",
    ]


def test_a_finished_run_of_the_current_code_is_compared_without_training(
    tmp_path, version, trained
):
    root = tmp_path / "runs"
    version("aaaaaaaaaaaa")
    [run_case(*t) for t in _tasks(root)]
    version("bbbbbbbbbbbb")
    run_case(*_tasks(root)[2], adopt_older=False)  # seed 2 already trained by the new code
    notes, _ = _sweep(_tasks(root))
    assert trained == [0, 1, 2, 2] and "seed 2 reproduced exactly" in notes[0]


def test_differences_name_metrics_weights_and_numbers(tmp_path, version):
    root = tmp_path / "runs"
    version("aaaaaaaaaaaa")
    t = _tasks(root)[0]
    run_case(*t)
    a = case_run_dir(*t)
    b = tmp_path / "copy"
    shutil.copytree(a, b)
    assert adopt.differences(a, b) == []
    metrics = next(b.glob("*_sim/metrics.csv"))
    metrics.write_text(metrics.read_text().replace(",", ";", 1))
    doc = json.loads((b / "result.json").read_text())
    doc["greedy"] += 1e-9
    (b / "result.json").write_text(json.dumps(doc))
    import torch

    ckpt = next(b.glob("*_sim/policy.pt"))
    saved = torch.load(ckpt, weights_only=True)
    name = next(iter(saved["state_dict"]))
    saved["state_dict"][name] = saved["state_dict"][name] + 1e-6
    torch.save(saved, ckpt)
    diff = adopt.differences(a, b)
    assert any(d.startswith("greedy ") for d in diff)
    assert any(d.endswith("_sim/metrics.csv differs") for d in diff)
    assert any(d.endswith("_sim/policy.pt weights differ") for d in diff)


def test_another_configuration_is_never_taken_for_an_older_version(tmp_path, version):
    root = tmp_path / "runs"
    version("aaaaaaaaaaaa")
    t = _tasks(root)[0]
    run_case(*t)
    other = TINY.__class__(**{**TINY.__dict__, "samples": 3})
    version("bbbbbbbbbbbb")
    assert adopt.older_runs(lambda v: case_run_dir(other, *t[1:], version=v)) == {}
    assert list(adopt.older_runs(lambda v: case_run_dir(*t, version=v))) == ["aaaaaaaaaaaa"]


def test_the_summary_line_counts_adopted_runs_by_version():
    runs = [
        {"code_version": "n"},
        {"code_version": "o1", "adopted": {"from": "o1", "under": "n", "check_seed": 0}},
        {"code_version": "o1", "adopted": {"from": "o1", "under": "n", "check_seed": 0}},
        {"code_version": "o2", "adopted": {"from": "o2", "under": "n", "check_seed": 1}},
    ]
    line = adopt.summary_line(runs)
    assert line.startswith("3 of 4 runs were trained by an older code version (o1: 2, o2: 1)")
    assert "adopted by n" in line
    assert adopt.summary_line(runs[:1]) == ""
    assert [adopt.trained_by(r) for r in runs] == ["n", "o1", "o1", "o2"]


def test_a_failed_check_of_an_equal_version_stops_its_whole_class(tmp_path, version):
    cell = tmp_path / "cell"
    cell.mkdir()
    version("cccccccccccc")
    ledger = {
        "aaaaaaaaaaaa->bbbbbbbbbbbb": {"identical": True},
        "bbbbbbbbbbbb->cccccccccccc": {"identical": False},
    }
    (cell / adopt.LEDGER).write_text(json.dumps(ledger))
    assert adopt.verdict(cell, "aaaaaaaaaaaa") is False  # a's class failed through b
    assert adopt.verdict(cell, "bbbbbbbbbbbb") is False
    assert adopt.verdict(cell, "dddddddddddd") is None


def test_checks_of_two_older_versions_share_one_new_run(tmp_path, version, trained, monkeypatch):
    root = tmp_path / "runs"
    version("aaaaaaaaaaaa")
    [run_case(*t) for t in _tasks(root)[:2]]
    version("bbbbbbbbbbbb")  # another older version of the same cell, not shown equal to a
    [run_case(*t, adopt_older=False) for t in _tasks(root)[:2]]
    version("cccccccccccc")
    checks = adopt.checks_needed(
        (t, t[3], lambda v, t=t: case_run_dir(*t, version=v)) for t in _tasks(root)
    )
    assert sorted(c[2] for c in checks) == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    assert {c[1] for c in checks} == {0}
    sent = []
    real = bench_policy.make_runner

    def spy(*a, **k):
        runner = real(*a, **k)
        run = runner.run
        runner.run = lambda runs, **kw: (sent.append([r.label for r in runs]), run(runs, **kw))[1]
        return runner

    monkeypatch.setattr(bench_policy, "make_runner", spy)
    notes, after = _sweep(_tasks(root))
    # one check run for both older versions: two runs of seed 0 at once (two processes) wrote
    # one folder together, and neither check could pass
    assert sent == [["check chainmm/doppler/seed0"]]
    assert trained == [0, 1, 0, 1, 0, 2] and len(notes) == 2
    assert all("reproduced exactly" in n for n in notes)


def test_a_run_folder_held_by_another_writer_is_not_written(tmp_path, version, trained):
    from doppler_lab.house.errors import RunFolderError
    from doppler_lab.house.runfolder import run_folder

    version("aaaaaaaaaaaa")
    t = _tasks(tmp_path / "runs")[0]
    with run_folder(case_run_dir(*t), "bench", mark=False):
        with pytest.raises(RunFolderError):
            run_case(*t)
    assert trained == []

"""The committed run store (``house/runstore.py``): finished runs recorded as small JSON files,
written back as run folders on another checkout, counted as finished there, and adopted by a
later code version by their digests as if they had been trained on that machine."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from sweeps import TINY_SWEEP as TINY

from doppler_lab.cli import main
from doppler_lab.house import runstore
from doppler_lab.house.errors import FormatError
from doppler_lab.house.paths import REPO_ROOT
from doppler_lab.lab.bench import adopt
from doppler_lab.lab.bench import policy as bench_policy
from doppler_lab.lab.bench.policy import _cases, adopted_sweep, case_run_dir, case_runs, run_case


def _tasks(root: Path, seeds: int = 3):
    (case,) = _cases(TINY)[0]
    return [(TINY, case, "doppler", s, root) for s in range(seeds)]


def _train(root: Path, seeds: int = 3) -> list[dict]:
    return [run_case(*t) for t in _tasks(root, seeds)]


def test_weights_digest_is_the_tensors_not_the_file(tmp_path):
    state = {"b": torch.arange(3.0), "a": torch.ones(2, 2)}
    torch.save({"state_dict": state, "step": 1}, tmp_path / "one.pt")
    torch.save({"state_dict": dict(reversed(state.items())), "step": 9}, tmp_path / "two.pt")
    assert runstore.weights_digest(tmp_path / "one.pt") == runstore.weights_digest(
        tmp_path / "two.pt"
    )
    for changed in (
        {**state, "a": torch.ones(2, 2) + 1e-7},
        {**state, "a": torch.ones(4)},  # same bytes, another shape
        {**state, "b": torch.arange(3.0).double()},
    ):
        torch.save({"state_dict": changed}, tmp_path / "three.pt")
        assert runstore.weights_digest(tmp_path / "three.pt") != runstore.weights_digest(
            tmp_path / "one.pt"
        )


def test_keep_then_restore_gives_the_same_records_and_a_finished_run(
    tmp_path, version, trained, monkeypatch
):
    version("aaaaaaaaaaaa")
    root, store, other = tmp_path / "runs", tmp_path / "store", tmp_path / "elsewhere"
    before = _train(root)
    kept = runstore.keep(root, store)
    assert len(kept.written) == 3 and kept.unchanged == 0
    doc = json.loads(next(store.rglob("seed0-*.json")).read_text())
    assert doc["result"]["checkpoint"] == "2_sim/policy.pt"  # relative to the run folder
    assert set(doc["stages"]) == {"1_imitation", "2_sim"}
    assert len(doc["stages"]["2_sim"]["weights_sha256"]) == 64
    hashed = []
    digest = runstore.weights_digest
    monkeypatch.setattr(
        runstore, "weights_digest", lambda path: hashed.append(path) or digest(path)
    )
    assert runstore.keep(root, store).unchanged == 3  # nothing rewritten, nothing rehashed
    assert hashed == []
    stored = next(store.rglob("seed1-*.json"))
    stale = json.loads(stored.read_text())
    stale["stages"]["2_sim"]["weights_sha256"] = "0" * 64
    stale["result"]["train_s"] = -1.0  # another run's record at this path: rewritten
    stored.write_text(json.dumps(stale))
    assert len(runstore.keep(root, store).written) == 1 and len(hashed) == 2
    assert json.loads(stored.read_text())["stages"]["2_sim"]["weights_sha256"] != "0" * 64

    back = runstore.restore(store, other)
    assert len(back.written) == 3
    for t, old in zip(_tasks(other), before, strict=True):
        new_dir = case_run_dir(*t)
        assert runstore.record(new_dir) == runstore.record(case_run_dir(*t[:4], root))
        assert adopt.differences(case_run_dir(*t[:4], root), new_dir) == []
        again = run_case(*t)  # finished: returned, not trained
        assert {k: again[k] for k in adopt.RESULT_FIELDS} == {
            k: old[k] for k in adopt.RESULT_FIELDS
        }
        assert again["checkpoint"] == str(new_dir / "2_sim" / "policy.pt")
        assert not Path(again["checkpoint"]).exists() and again["restored"].endswith(".json")
    assert trained == [0, 1, 2]
    assert runstore.keep(other, store).unchanged == 3  # a restored run records the same
    assert runstore.restore(store, other).unchanged == 3


def test_a_restored_run_is_adopted_by_a_later_version_after_one_check(
    tmp_path, version, trained, monkeypatch
):
    version("aaaaaaaaaaaa")
    root, store = tmp_path / "runs", tmp_path / "store"
    before = _train(root)
    runstore.keep(root, store)
    shutil.rmtree(root)  # a fresh checkout: the cache is gone, the store is committed
    monkeypatch.setattr(runstore, "store_for", lambda r: store if Path(r) == root else None)
    version("bbbbbbbbbbbb")
    tasks = _tasks(root)
    sweep, notes, _ = adopted_sweep(
        tasks, case_runs(TINY, [t[1:4] for t in tasks], root), "sweep", jobs=1
    )
    assert trained == [0, 1, 2, 0]  # seed 0 again, as the check; 1 and 2 adopted
    assert notes[0].startswith("restored 3 run(s)")
    assert "adopted (seed 0 reproduced exactly)" in notes[1]
    after = sweep.done()
    for old, new in zip(before, after, strict=True):
        assert {k: new[k] for k in adopt.RESULT_FIELDS} == {k: old[k] for k in adopt.RESULT_FIELDS}
    assert [r.get("adopted", {}).get("from") for r in after] == [None] + ["aaaaaaaaaaaa"] * 2
    # the verdict goes to the store with the new run, so the next checkout needs no check
    kept = runstore.keep(root, store)
    assert len(kept.written) == 1 and kept.ledgers == 1
    ledger = json.loads(next(store.rglob(runstore.LEDGER)).read_text())
    assert ledger["aaaaaaaaaaaa->bbbbbbbbbbbb"]["identical"] is True


def test_a_restored_run_that_the_new_code_does_not_reproduce_is_retrained(
    tmp_path, version, trained
):
    version("aaaaaaaaaaaa")
    root, store, fresh = tmp_path / "runs", tmp_path / "store", tmp_path / "fresh"
    _train(root, seeds=2)
    runstore.keep(root, store)
    for path in store.rglob("seed*.json"):  # as if the older code had ended elsewhere
        doc = json.loads(path.read_text())
        doc["stages"]["2_sim"]["weights_sha256"] = "0" * 64
        path.write_text(json.dumps(doc))
    runstore.restore(store, fresh)
    version("bbbbbbbbbbbb")
    notes = bench_policy.verify_adoptions(_tasks(fresh, seeds=2))
    assert "did not reproduce" in notes[0] and "2_sim/policy.pt weights differ" in notes[0]


def test_restore_leaves_a_run_in_progress_alone_and_names_a_bad_record(tmp_path, version):
    version("aaaaaaaaaaaa")
    root, store, other = tmp_path / "runs", tmp_path / "store", tmp_path / "other"
    _train(root, seeds=1)
    runstore.keep(root, store)
    (record,) = store.rglob("seed0-*.json")
    in_progress = other / record.relative_to(store).with_suffix("")
    (in_progress / "1_imitation").mkdir(parents=True)
    counts = runstore.restore(store, other)
    assert counts.written == [] and len(counts.skipped) == 1
    assert not (in_progress / "result.json").exists()
    shutil.rmtree(other)
    record.write_text(json.dumps({"format": 1, "result": {}, "stages": {"../x": {}}}))
    with pytest.raises(FormatError, match=r"seed0-.*stage '\.\./x' must be a folder name"):
        runstore.restore(store, other)
    record.write_text("[1]")
    with pytest.raises(FormatError, match="must be a JSON object"):
        runstore.restore(store, other)


def test_only_the_checkouts_stored_caches_have_a_store(tmp_path):
    assert runstore.store_for(REPO_ROOT / "runs" / "bench_policy") == (
        REPO_ROOT / "data" / "runs" / "bench_policy"
    )
    assert runstore.store_for(REPO_ROOT / "runs" / "bench_policy_quick") is None
    assert runstore.store_for(tmp_path / "runs" / "bench_policy") is None


def test_the_runs_command(tmp_path, version, monkeypatch, capsys):
    version("aaaaaaaaaaaa")
    import doppler_lab.house.paths as paths

    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(runstore, "REPO_ROOT", tmp_path)
    _train(tmp_path / "runs" / "bench_policy", seeds=2)
    assert main(["runs", "status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["finished_here"] == 2 and doc["stored"] == 0 and len(doc["to_keep"]) == 2
    assert main(["runs", "keep"]) == 0
    assert capsys.readouterr().out.startswith("kept 2 run(s)")
    assert len(list((tmp_path / "data" / "runs" / "bench_policy").rglob("seed*.json"))) == 2
    shutil.rmtree(tmp_path / "runs")
    assert main(["runs", "status"]) == 0
    out = capsys.readouterr().out
    assert "2 run(s) (code aaaaaaaaaaaa: 2)" in out and "to restore: 2" in out
    assert main(["runs", "restore"]) == 0
    assert capsys.readouterr().out.startswith("restored 2 run(s)")
    assert main(["runs", "status", "--cache", "elsewhere"]) == 2
    assert "--cache 'elsewhere' has no run store" in capsys.readouterr().err


def test_runs_are_kept_while_a_long_job_runs_and_when_it_stops(tmp_path, version, monkeypatch):
    """``keeping`` (what a report build of the site runs under) records finished runs in the
    store during the job, and once more when it stops, by an interrupt too."""
    version("aaaaaaaaaaaa")
    monkeypatch.setattr(runstore, "REPO_ROOT", tmp_path)
    cache, store = tmp_path / "runs" / "bench_policy", tmp_path / "data" / "runs" / "bench_policy"
    _train(cache, seeds=1)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt), runstore.keeping(0.05, report=said.append):
        for _ in range(400):  # the first run reaches the store while the job goes on
            if list(store.rglob("seed0-*.json")):
                break
            time.sleep(0.05)
        assert len(list(store.rglob("seed*.json"))) == 1
        _train(cache, seeds=2)  # seed 1 finishes ...
        (case_run_dir(*_tasks(cache, 3)[2]) / "2_sim").mkdir(parents=True)  # ... seed 2 runs
        raise KeyboardInterrupt
    assert sorted(p.name.split("-")[0] for p in store.rglob("seed*.json")) == ["seed0", "seed1"]
    assert said[0].startswith("kept 1 run(s)") and said[0].endswith("commit data/runs")


def test_runs_keep_every(tmp_path, version, monkeypatch, capsys):
    version("aaaaaaaaaaaa")
    import doppler_lab.house.paths as paths

    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(runstore, "REPO_ROOT", tmp_path)
    _train(tmp_path / "runs" / "bench_policy", seeds=1)
    for bad in ("0", "-1", "x", "inf"):
        assert main(["runs", "keep", "--every", bad]) == 2
        assert "expected a positive number of minutes" in capsys.readouterr().err
    from doppler_lab.commands import runs as runs_command

    store = tmp_path / "data" / "runs" / "bench_policy"

    def meanwhile():  # a run finishes while the command waits; Ctrl-C once it is kept
        _train(tmp_path / "runs" / "bench_policy", seeds=2)
        for _ in range(400):
            if len(list(store.rglob("seed*.json"))) == 2:
                break
            time.sleep(0.05)
        raise KeyboardInterrupt

    monkeypatch.setattr(runs_command, "_wait_for_ctrl_c", meanwhile)
    assert main(["runs", "keep", "--every", "0.001"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("every 0.001 min (Ctrl-C stops)")
    assert "kept 1 run(s)" in out[1]  # at once
    assert "kept 1 run(s)" in out[2] and "1 already there" in out[2]  # seed 1, while waiting
    assert out[-1] == "stopped"
    assert len(list(store.rglob("seed*.json"))) == 2


def test_one_reader_names_the_bad_record_and_one_helper_places_the_checkpoint(tmp_path):
    """The store, the adoption ledger and the run's result are read by one strict reader
    (``validate.read_json_object``): a bad file is named with what it should have been; the
    checkpoint a result recorded is placed in its run folder by one helper, wherever the folder
    lay when it was recorded."""
    from doppler_lab.house.validate import read_json_object

    bad = tmp_path / "seed0-aaaa.json"
    for text, why in (
        ('{"a": NaN}', r"a stored run could not be read as JSON \(.*NaN"),
        ('{"a": 1, "a": 2}', r"a stored run could not be read as JSON \(.*'a'"),
        ("[1]", "a stored run must be a JSON object, got list"),
    ):
        bad.write_text(text)
        with pytest.raises(FormatError, match=why) as info:
            read_json_object(bad, "a stored run")
        assert str(info.value).startswith(f"{bad}: ") and str(info.value).count(str(bad)) == 1
    with pytest.raises(FormatError, match=r"seed0-bbbb.json: a run's result could not be read"):
        read_json_object(tmp_path / "seed0-bbbb.json", "a run's result")
    assert adopt._read_json(bad) is None and adopt._read_json(tmp_path / "none.json") is None

    run = tmp_path / "runs" / "g" / "doppler" / "seed0-aaaa"
    assert runstore.checkpoint_in_run(
        "/old/machine/runs/g/doppler/seed0-aaaa/2_sim/policy.pt", run
    ) == Path("2_sim/policy.pt")
    assert runstore.checkpoint_in_run("2_sim/policy.pt", run) is None
    assert runstore.checkpoint_in_run("", run) is None


def test_keeping_never_ends_the_job_it_runs_beside(tmp_path, monkeypatch):
    """A cache that cannot be kept is named in a line; the job's own error is the one raised."""
    monkeypatch.setattr(runstore, "REPO_ROOT", tmp_path)
    (tmp_path / "runs" / "bench_policy").mkdir(parents=True)

    def broken(root, store):
        raise RuntimeError("a weights file cut short")

    monkeypatch.setattr(runstore, "keep", broken)
    said: list[str] = []
    with pytest.raises(KeyError, match="the job's own"), runstore.keeping(60, said.append):
        raise KeyError("the job's own")
    assert said == [
        f"runs of {tmp_path / 'runs' / 'bench_policy'} not kept: RuntimeError: a weights file "
        "cut short"
    ]


def test_runs_cells_says_what_a_sweep_would_adopt_check_or_train_without_training(
    tmp_path, version, monkeypatch, capsys
):
    import doppler_lab.house.paths as paths
    from doppler_lab.commands.runs import cells

    version("aaaaaaaaaaaa")
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(runstore, "REPO_ROOT", tmp_path)
    _train(tmp_path / "runs" / "bench_policy", seeds=2)
    store = tmp_path / "data" / "runs" / "bench_policy"
    runstore.keep(tmp_path / "runs" / "bench_policy", store)
    (row,) = cells(store)
    assert row["current"] == [0, 1] and row["checks"] == {} and row["budget"].count("+") == 1
    version("bbbbbbbbbbbb")
    (row,) = cells(store)
    assert row["to_check"] == [0, 1] and row["checks"] == {"aaaaaaaaaaaa": "train"}
    # seed 0 trained by this version too: the check compares it, trains nothing
    (seed0,) = store.rglob("seed0-*.json")
    doc = json.loads(seed0.read_text())
    doc["result"]["code_version"] = "bbbbbbbbbbbb"
    (seed0.parent / "seed0-bbbb.json").write_text(json.dumps(doc))
    (row,) = cells(store)
    assert (row["current"], row["to_check"]) == ([0], [1])
    assert row["checks"] == {"aaaaaaaaaaaa": "compare"}
    assert row["by_version"] == {"aaaaaaaaaaaa": 2, "bbbbbbbbbbbb": 1}
    ledger = seed0.parent / runstore.LEDGER
    for identical, state in ((True, "adoptable"), (False, "retrain")):
        ledger.write_text(json.dumps({"aaaaaaaaaaaa->bbbbbbbbbbbb": {"identical": identical}}))
        (row,) = cells(store)
        assert row[state] == [1] and row["checks"] == {}
    assert main(["runs", "cells"]) == 0
    out = capsys.readouterr().out
    assert "code version bbbbbbbbbbbb" in out and "2 stored seed(s) in 1 cell(s)" in out
    assert "1 current, 0 adoptable, 0 to check, 1 retrain" in out
    ledger.unlink()
    assert main(["runs", "cells", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cells"][0]["checks"] == {"aaaaaaaaaaaa": "compare"}
    seed0.write_text(json.dumps({"format": 1, "result": {"seed": "zero"}, "stages": {}}))
    assert main(["runs", "cells"]) == 2
    assert "a stored run needs a 'result' with an integer 'seed'" in capsys.readouterr().err


def test_a_kept_run_names_the_machine_that_trained_it_and_a_restored_one_does_not(
    tmp_path, version
):
    version("aaaaaaaaaaaa")
    root, store, other, store2 = (tmp_path / n for n in ("runs", "store", "other", "store2"))
    _train(root, seeds=1)
    runstore.keep(root, store)
    (path,) = store.rglob("seed0-*.json")
    here = runstore.machine()
    assert json.loads(path.read_text())["machine"] == here
    assert set(runstore.MACHINE_KEYS) <= set(here) and here["cpu_flags_sha256"]
    assert runstore.same_machine(here, dict(here, cores=64))  # cores decide no rounding
    assert not runstore.same_machine(here, dict(here, torch_vector="AVX2"))
    assert not runstore.same_machine(here, None) and not runstore.same_machine({}, {})
    # a record kept before machines were recorded gets this one, once
    doc = json.loads(path.read_text())
    del doc["machine"]
    path.write_text(json.dumps(doc))
    assert len(runstore.keep(root, store).written) == 1
    assert json.loads(path.read_text())["machine"] == here
    assert runstore.keep(root, store).unchanged == 1
    # restored elsewhere and kept in another store: the machine there did not train it
    runstore.restore(store, other)
    runstore.keep(other, store2)
    (copy,) = store2.rglob("seed0-*.json")
    assert "machine" not in json.loads(copy.read_text())

"""Raw measurements kept beside a report refit the profile offline (``calibrate --from``).

``tests/data/fidelity_raw_quick.json.gz`` is the raw file of a real ``doppler-lab bench
fidelity --quick`` run on 2 CPU workers; ``fidelity_quick_profile.json`` the profile refitted
from it when it was committed. The fit is deterministic: the numbers must not move unless the
fit itself changes (then refit and say why in the commit).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from doppler_lab.cli import main
from doppler_lab.house.errors import FormatError
from doppler_lab.timing.calibration import OP_TIME_QUANTILE, Profile
from doppler_lab.timing.raw_data import CalibrationRaw, read_raw, refit_profile, write_raw

DATA = Path(__file__).parent / "data"
RAW = DATA / "fidelity_raw_quick.json.gz"
EXPECTED = DATA / "fidelity_quick_profile.json"


def test_calibrate_from_raw_refits_the_committed_profile(tmp_path, capsys):
    out = tmp_path / "refit.json"
    assert main(["calibrate", "--from", str(RAW), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_devices"] == 2 and summary["backend"] == "cpu"
    got, want = Profile.load(out).to_dict(), json.loads(EXPECTED.read_text())
    assert got == want


def test_the_fitted_numbers_follow_from_the_samples():
    """Independent of the committed profile: the op-time table is each signature's quantile
    per device, the dispatch gaps are the measured ones, and the links were fitted from
    both directions' samples."""
    raw = read_raw(RAW)
    cal = raw["calibration"]
    prof = cal.fit()
    assert prof.dispatch_s == cal.dispatch_s and all(g > 0 for g in prof.dispatch_s)
    by: dict[tuple[str, int], list[float]] = {}
    for s in cal.op_samples:
        by.setdefault((s.signature, s.device), []).append(s.time_s)
    assert len(prof.op_times) == len({k[0] for k in by})
    for (sig, d), xs in by.items():
        assert prof.op_times[sig][d] == float(np.quantile(xs, OP_TIME_QUANTILE))
    pairs = {(s.src, s.dst) for s in cal.link_samples}
    assert pairs == {(0, 1), (1, 0)}
    assert np.all(prof.bandwidth_bytes_per_s[[0, 1], [1, 0]] > 0)
    # the workloads' runs: every placement with its timed runs, as the report counted them
    report = json.loads((DATA / "fidelity_quick_report.json").read_text())
    for row in report["tables"]["Per workload"]:
        w = raw["workloads"][row["workload"]]
        m = np.median(np.asarray(w["measured_s"]), axis=1)
        assert len(w["placements"]) == row["placements"]
        assert round(float(m.min()) * 1e3, 3) == pytest.approx(row["measured_min_ms"], abs=1e-3)


def test_raw_round_trip_and_bad_files(tmp_path):
    cal = read_raw(RAW)["calibration"]
    path = write_raw(tmp_path / "r.json.gz", "test", cal, {"w": {"measured_s": [[1.0]]}})
    again = read_raw(path)
    assert again["source"] == "test" and again["workloads"] == {"w": {"measured_s": [[1.0]]}}
    assert again["calibration"].to_dict() == cal.to_dict()
    assert (
        write_raw(tmp_path / "s.json.gz", "test", cal, {}).read_bytes()
        == write_raw(tmp_path / "t.json.gz", "test", cal, {}).read_bytes()
    )  # reproducible bytes
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"format": "doppler_lab.profile"}'))
    with pytest.raises(FormatError, match="not a raw measurements file"):
        read_raw(bad)
    doc = cal.to_dict()
    doc["ops"]["device"][0] = 7
    with pytest.raises(FormatError, match=r"ops device\[0\] = 7, expected an integer in \[0, 2\)"):
        CalibrationRaw.from_dict(doc, "x")
    empty = write_raw(tmp_path / "e.json.gz", "test", None, {})
    with pytest.raises(FormatError, match="made no calibration"):
        refit_profile(empty)


def test_calibrate_from_a_bad_file_is_one_line(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{}")
    assert main(["calibrate", "--from", str(tmp_path / "x.json"), "--out", "p.json"]) == 2
    err = capsys.readouterr().err
    assert "not a raw measurements file" in err and len(err.strip().splitlines()) == 1

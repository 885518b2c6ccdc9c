"""Saved programs (``.pt2``) run code when loaded: they load only when trusted (``--trust-pt2``,
``$DOPPLER_LAB_TRUST_PT2``, ``trust=True``); the refusal and a bad file are one line each."""

from __future__ import annotations

import pytest
import torch

from doppler_lab.cli import main
from doppler_lab.house.errors import ImportModelError
from doppler_lab.house.trust import TRUST_PT2_ENV, trust_pt2
from doppler_lab.importers import from_exported


@pytest.fixture
def no_load(monkeypatch):
    """torch.export.load must not be reached."""
    calls = []

    def load(*a, **k):
        calls.append(a)
        raise AssertionError("torch.export.load called on an untrusted file")

    monkeypatch.setattr(torch.export, "load", load)
    monkeypatch.delenv(TRUST_PT2_ENV, raising=False)
    return calls


@pytest.fixture
def pt2(tmp_path):
    path = tmp_path / "evil.pt2"
    path.write_bytes(b"PK not really a zip")
    return path


def test_library_refuses_an_untrusted_file_before_loading(no_load, pt2):
    with pytest.raises(ImportModelError) as info:
        from_exported(pt2)
    msg = str(info.value)
    assert "\n" not in msg and str(pt2) in msg
    assert "--trust-pt2" in msg and TRUST_PT2_ENV in msg
    assert no_load == []


@pytest.mark.parametrize("command", [["import"], ["place", "--placer", "cp"], ["simulate"]])
def test_every_command_refuses_an_untrusted_file_in_one_line(no_load, pt2, capsys, command):
    argv = [command[0], str(pt2), *command[1:], "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--trust-pt2" in err and str(pt2) in err
    assert no_load == []


def test_train_refuses_an_untrusted_graph(no_load, pt2, tmp_path, capsys):
    assert main(["train", "--graph", str(pt2), "--out", str(tmp_path / "run"), "--json"]) == 2
    assert "--trust-pt2" in capsys.readouterr().err
    assert no_load == []


def test_trust_by_flag_environment_or_context_reaches_the_loader(monkeypatch, pt2, capsys):
    monkeypatch.delenv(TRUST_PT2_ENV, raising=False)
    calls = []

    def load(path):
        calls.append(path)
        raise RuntimeError("stop here")

    monkeypatch.setattr(torch.export, "load", load)
    assert main(["import", str(pt2), "--trust-pt2", "--no-progress"]) == 2
    assert "not a saved ExportedProgram: stop here" in capsys.readouterr().err
    with trust_pt2():
        with pytest.raises(ImportModelError, match="stop here"):
            from_exported(pt2)
    monkeypatch.setenv(TRUST_PT2_ENV, "1")
    with pytest.raises(ImportModelError, match="stop here"):
        from_exported(pt2)
    with trust_pt2(False):  # the innermost setting wins over the environment
        with pytest.raises(ImportModelError, match="--trust-pt2"):
            from_exported(pt2)
    assert len(calls) == 3


def test_a_bad_trusted_file_is_one_line_without_torchs_log(pt2, capfd):
    assert main(["import", str(pt2), "--trust-pt2", "--no-progress"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "not a saved ExportedProgram" in err and str(pt2) in err

"""``doppler-lab data paper-graphs`` against a local HTTP server serving copies of the paper's
graphs (made at test time from the folder the package finds; never committed)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import socket
import threading
from pathlib import Path

import pytest

from doppler_lab.cli import main
from doppler_lab.datasets import (
    PAPER_COMMIT,
    PAPER_FOLDER,
    PAPER_GRAPH_SHA256,
    PAPER_REPO,
    install_paper_graphs,
)
from doppler_lab.errors import DataError
from doppler_lab.paths import PAPER_GRAPHS_ENV, paper_graphs_dir, user_paper_graphs_dir


@pytest.fixture
def paper_source() -> Path:
    """The folder holding the six released files (skips without them)."""
    folder = paper_graphs_dir()
    if folder is None or not all((folder / n).is_file() for n in PAPER_GRAPH_SHA256):
        pytest.skip("the paper's graphs are not available (see `doppler-lab data where`)")
    return folder


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no request log on stderr
        pass


@pytest.fixture(autouse=True)
def _no_proxy_for_localhost(monkeypatch):
    for name in ("no_proxy", "NO_PROXY"):  # a proxy in the environment must not catch 127.0.0.1
        monkeypatch.setenv(name, "127.0.0.1,localhost")


@pytest.fixture
def served(tmp_path: Path, paper_source: Path):
    """A server on 127.0.0.1 laid out like raw.githubusercontent.com; yields (url, folder)."""
    root = tmp_path / "www"
    folder = root / PAPER_REPO / PAPER_COMMIT / PAPER_FOLDER
    folder.mkdir(parents=True)
    for name in PAPER_GRAPH_SHA256:
        shutil.copyfile(paper_source / name, folder / name)
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pinned_hashes_are_those_of_the_shared_copies(paper_source):
    assert {n: _sha(paper_source / n) for n in PAPER_GRAPH_SHA256} == PAPER_GRAPH_SHA256


def test_install_downloads_checks_and_installs(served, tmp_path, capsys):
    url, _ = served
    dest = tmp_path / "graphs"
    assert main(["data", "paper-graphs", "--dest", str(dest), "--base-url", url]) == 0
    assert {n: _sha(dest / n) for n in PAPER_GRAPH_SHA256} == PAPER_GRAPH_SHA256
    assert "6 installed" in capsys.readouterr().out
    # a second run checks what is there and fetches nothing
    assert install_paper_graphs(dest, url) == dict.fromkeys(PAPER_GRAPH_SHA256, "present")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graphs", "www"]  # no staging left


def test_a_corrupted_file_installs_nothing(served, tmp_path, capsys):
    url, folder = served
    bad = folder / "full_transformer_layer_261nodes.txt"  # the fourth: three pass before it
    bad.write_bytes(bad.read_bytes().replace(b"1", b"2", 1))
    dest = tmp_path / "graphs"
    assert main(["data", "paper-graphs", "--dest", str(dest), "--base-url", url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "sha256" in err and "full_transformer_layer_261nodes.txt" in err
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["www"]  # no staging left


def test_unreachable_server_is_one_line_naming_the_way_out(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dest = tmp_path / "graphs"
    rc = main(
        ["data", "paper-graphs", "--dest", str(dest), "--base-url", f"http://127.0.0.1:{port}"]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "offline" in err and "--from DIR" in err and PAPER_GRAPHS_ENV in err
    assert not dest.exists()


def test_from_a_local_folder_into_the_user_folder_found_by_every_command(
    paper_source, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(PAPER_GRAPHS_ENV, raising=False)
    assert main(["data", "paper-graphs", "--from", str(paper_source)]) == 0
    dest = user_paper_graphs_dir()
    assert dest == tmp_path / "xdg" / "doppler_lab" / "paper-graphs"
    assert {n: _sha(dest / n) for n in PAPER_GRAPH_SHA256} == PAPER_GRAPH_SHA256
    assert paper_graphs_dir() == dest  # before the checkout's shared copy


def test_from_a_folder_missing_a_file_says_which(paper_source, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copyfile(paper_source / "ffnn_192nodes.txt", partial / "ffnn_192nodes.txt")
    with pytest.raises(DataError, match="chain_mm_112nodes.txt does not exist"):
        install_paper_graphs(tmp_path / "graphs", from_dir=partial)
    assert not (tmp_path / "graphs").exists()

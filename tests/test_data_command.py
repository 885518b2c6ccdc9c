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
from doppler_lab.house.errors import DataError, WriteError
from doppler_lab.house.paths import PAPER_GRAPHS_ENV, paper_graphs_dir, user_paper_graphs_dir
from doppler_lab.io.datasets import (
    PAPER_COMMIT,
    PAPER_FOLDER,
    PAPER_GRAPH_SHA256,
    PAPER_REPO,
    install_paper_graphs,
)


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


# -- a hostile server: too big, too slow; bounded in time, 127.0.0.1 only -----------------------
class _Hostile(http.server.BaseHTTPRequestHandler):
    """``/big-announced/...``: a Content-Length over the limit; ``/big/...``: no length, bytes
    until the client stops; ``/trickle/...``: one byte every 0.2 s (for at most 10 s)."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        import time

        mode = self.path.strip("/").split("/")[0]
        self.send_response(200)
        if mode == "big-announced":
            self.send_header("Content-Length", str(10**12))
        elif mode == "trickle":
            self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 10:
                if mode == "trickle":
                    self.wfile.write(b"1")
                    self.wfile.flush()
                    time.sleep(0.2)
                else:
                    self.wfile.write(b"1" * 65536)
        except OSError:  # the client went away
            pass


@pytest.fixture
def hostile():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=15)


@pytest.mark.parametrize("mode", ["big-announced", "big"])
def test_a_body_over_the_size_limit_is_refused_while_streaming(hostile, tmp_path, mode):
    import time

    dest = tmp_path / "graphs"
    t0 = time.monotonic()
    with pytest.raises(DataError, match="limit of 1000000 bytes") as info:
        install_paper_graphs(dest, f"{hostile}/{mode}", max_bytes=1_000_000, deadline_s=20)
    assert time.monotonic() - t0 < 10
    assert "\n" not in str(info.value)
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no staging folder left


def test_a_trickling_server_is_cut_off_at_the_overall_time_limit(hostile, tmp_path, capsys):
    import time

    dest = tmp_path / "graphs"
    t0 = time.monotonic()
    rc = main(
        ["data", "paper-graphs", "--dest", str(dest), "--base-url", f"{hostile}/trickle"]
        + ["--time-limit", "1.5"]
    )
    took = time.monotonic() - t0
    assert rc == 2
    assert took < 6, took  # the per-read timeout (30 s) never fires: bytes keep coming
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "time limit of 1.5 s" in err
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no staging folder left


def test_a_failed_staging_write_is_one_line_and_leaves_nothing(paper_source, tmp_path, monkeypatch):
    import errno

    import doppler_lab.io.datasets as ds

    real_open = open

    def full_open(path, mode="r", *a, **k):
        if "w" in mode and str(path).startswith(str(tmp_path)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(ds, "open", full_open, raising=False)
    with pytest.raises(WriteError) as info:
        install_paper_graphs(tmp_path / "graphs", from_dir=paper_source)
    assert "no space left" in str(info.value) and "\n" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []

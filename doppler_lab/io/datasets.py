"""The paper's released graphs as a pinned download (``doppler-lab data paper-graphs``).

The six cost-annotated graphs of the DOPPLER paper live in its public repository
(``github.com/xinyuyao/Doppler``, folder ``compute_graph/``, CC BY 4.0, (c) the paper's
authors). :func:`install_paper_graphs` fetches them at :data:`PAPER_COMMIT` (the first commit
holding these versions; the repository's head at the time of pinning holds the same bytes),
checks each file's sha256 against :data:`PAPER_GRAPH_SHA256`, and only then moves them into
the destination (by default the per-user folder that :func:`doppler_lab.house.paths.paper_graphs_dir`
searches), so a failed or corrupted download leaves nothing half installed. Without network,
``from_dir`` installs (and checks) a local copy instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..house.atomic import atomic_copy, atomic_write, write_error
from ..house.errors import ConfigError, DataError, WriteError
from ..house.paths import PAPER_GRAPHS_ENV, user_paper_graphs_dir

PAPER_REPO = "xinyuyao/Doppler"
PAPER_COMMIT = "87dda0d44180fd2825f0f0af2c8a223f38df8d62"
PAPER_FOLDER = "compute_graph"
RAW_BASE_URL = "https://raw.githubusercontent.com"
BASE_URL_ENV = "DOPPLER_LAB_PAPER_GRAPHS_URL"
PAPER_GRAPH_SHA256: dict[str, str] = {
    "chain_mm_112nodes.txt": "94783385166045561d55e04fd2bf377b82fbee307b97a4c9833ea4a1c1598410",
    "ffnn_192nodes.txt": "d8c2512e25e8a2ed67d0cd2bd878ed7d1f8f2508361fec546cfa8d626ef019fe",
    "transformer_block_215nodes.txt": "e95332fb47eef4257aad41e2b995b60f6b95604715e88720483c3222bfa8f19a",
    "full_transformer_layer_261nodes.txt": "0918301c881d5c198ac355e6340d4d69ad8a468a206a086d7e43526ca8f8ffa5",
    "8gpu_transformer_block.txt": "b5a95a0eb029b05ecf36b7ebd4dde34b1795f4bd03276aa4af2fc4083bf686dc",
    "8gpu_full_transformer.txt": "ffbccf9ffc0a91ac7221a9f1e90211ae6aa110383603138e446ad7c8228cc13e",
}  # fmt: skip
SOURCE_NOTE = "SOURCE.txt"  # written beside the graphs: where they come from, their license
LOCAL_COPY_HINT = (
    "to use a local copy of the paper repository's compute_graph/ folder: "
    f"`doppler-lab data paper-graphs --from DIR`, or set ${PAPER_GRAPHS_ENV}=DIR"
)


def paper_graph_url(name: str, base_url: str | None = None) -> str:
    """The raw URL of one paper graph at the pinned commit (``base_url``: else
    ``$DOPPLER_LAB_PAPER_GRAPHS_URL``, else raw.githubusercontent.com)."""
    base = (base_url or os.environ.get(BASE_URL_ENV) or RAW_BASE_URL).rstrip("/")
    scheme = base.partition("://")[0].lower() if "://" in base else ""
    if scheme not in ("http", "https", "file"):  # urllib's "unknown url type" was a traceback
        where = "--base-url" if base_url else f"${BASE_URL_ENV}"
        raise ConfigError(
            f"{where} {base!r}: expected a URL starting with https://, http:// or file://"
        )
    return f"{base}/{PAPER_REPO}/{PAPER_COMMIT}/{PAPER_FOLDER}/{name}"


#: the largest file accepted (the biggest paper graph is about 20 kB): checked against the
#: Content-Length header and while reading, so a wrong or hostile server cannot fill the disk
MAX_DOWNLOAD_BYTES = 4 * 1024 * 1024
#: seconds the whole install may take over the network (all files), however slowly the server
#: trickles its bytes; each read also times out after ``timeout_s``
DOWNLOAD_DEADLINE_S = 120.0
_CHUNK = 64 * 1024


def sha256_of(data: bytes) -> str:
    """The hex sha256 digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _set_read_timeout(response, seconds: float) -> None:
    """Shorten the socket timeout of ``response`` to what is left of the deadline (best
    effort: urllib keeps the socket at ``response.fp.raw._sock``)."""
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        try:
            sock.settimeout(max(seconds, 0.01))
        except OSError:
            pass


def _download(
    url: str,
    timeout_s: float,
    deadline: float | None = None,
    max_bytes: int = MAX_DOWNLOAD_BYTES,
    into=None,
    limit_s: float | None = None,
) -> bytes:
    """The body of ``url``, at most ``max_bytes`` long, read before the monotonic time
    ``deadline``; written to the binary file ``into`` as it arrives (returns b"" then)."""
    if deadline is None:
        limit_s = DOWNLOAD_DEADLINE_S
        deadline = time.monotonic() + limit_s
    left = deadline - time.monotonic()
    if left <= 0:
        raise _too_slow(url, limit_s)
    chunks: list[bytes] = []
    got = 0
    try:
        with urllib.request.urlopen(url, timeout=min(timeout_s, left)) as response:
            length = response.headers.get("Content-Length")
            if length is not None and length.strip().isdigit() and int(length) > max_bytes:
                raise DataError(
                    f"cannot download {url}: the server announces {int(length)} bytes, more "
                    f"than the limit of {max_bytes} bytes; {LOCAL_COPY_HINT}"
                )
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _too_slow(url, limit_s)
                _set_read_timeout(response, min(timeout_s, left))
                chunk = response.read1(_CHUNK)
                if not chunk:
                    break
                got += len(chunk)
                if got > max_bytes:
                    raise DataError(
                        f"cannot download {url}: more than the limit of {max_bytes} bytes; "
                        f"{LOCAL_COPY_HINT}"
                    )
                if into is not None:
                    try:
                        into.write(chunk)
                    except OSError as exc:
                        raise write_error(
                            into.name, exc, "cannot stage", "; nothing installed"
                        ) from None
                else:
                    chunks.append(chunk)
        if time.monotonic() > deadline:
            raise _too_slow(url, limit_s)
        return b"".join(chunks)
    except WriteError:
        raise
    except urllib.error.HTTPError as exc:
        raise DataError(
            f"cannot download {url}: HTTP {exc.code} {exc.reason}; {LOCAL_COPY_HINT}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        if time.monotonic() >= deadline:
            raise _too_slow(url, limit_s) from None
        reason = getattr(exc, "reason", None) or exc
        raise DataError(
            f"cannot download {url} (offline or unreachable: {reason}); {LOCAL_COPY_HINT}"
        ) from None


def _too_slow(url: str, limit_s: float | None) -> DataError:
    limit = f" of {limit_s:g} s" if limit_s is not None else ""
    return DataError(
        f"cannot download {url}: the downloads ran past their time limit{limit} "
        f"(--time-limit); {LOCAL_COPY_HINT}"
    )


def _read_local(folder: Path, name: str, max_bytes: int = MAX_DOWNLOAD_BYTES) -> bytes:
    path = folder / name
    if not path.is_file():
        raise DataError(
            f"{path} does not exist; expected a folder with the paper's compute_graph/ files "
            f"({', '.join(PAPER_GRAPH_SHA256)})"
        )
    if path.stat().st_size > max_bytes:
        raise DataError(
            f"{path} has {path.stat().st_size} bytes, more than the limit of {max_bytes} bytes"
        )
    return path.read_bytes()


def _installed(dest: Path, name: str) -> bool:
    path = dest / name
    return path.is_file() and sha256_of(path.read_bytes()) == PAPER_GRAPH_SHA256[name]


def install_paper_graphs(
    dest: str | os.PathLike | None = None,
    base_url: str | None = None,
    from_dir: str | os.PathLike | None = None,
    force: bool = False,
    timeout_s: float = 30.0,
    deadline_s: float = DOWNLOAD_DEADLINE_S,
    max_bytes: int = MAX_DOWNLOAD_BYTES,
) -> dict[str, str]:
    """Fetch the paper's six graphs at the pinned commit, check them, install them.

    Every file is fetched (or read from ``from_dir``) into a temporary folder beside ``dest``
    and checked against its pinned sha256; only when all six match are they moved into
    ``dest``. Files already in ``dest`` with the right checksum are kept unless ``force``.

    Args:
        dest: where to install (default :func:`doppler_lab.house.paths.user_paper_graphs_dir`).
        base_url: the raw-file server (default ``$DOPPLER_LAB_PAPER_GRAPHS_URL`` or
            raw.githubusercontent.com); files are at
            ``<base_url>/xinyuyao/Doppler/<commit>/compute_graph/<name>``.
        from_dir: install from this local folder instead of downloading.
        force: fetch again even the files already installed.
        timeout_s: network timeout of each read.
        deadline_s: seconds all downloads together may take (a server trickling bytes is cut
            off then; nothing is installed).
        max_bytes: the largest file accepted (from Content-Length and while reading).

    Returns:
        What happened to each file: ``"installed"`` or ``"present"`` (already there, checked).

    Raises:
        DataError: a download failed, was too big or too slow (one line, with how to use a
            local copy), a local file is missing, or a file's sha256 differs from the pinned
            one; nothing is installed then, and the staging folder is removed whatever happens.
    """
    target = Path(dest) if dest is not None else user_paper_graphs_dir()
    if target.exists() and not target.is_dir():
        raise DataError(f"destination {target} is a file; expected a folder")
    todo = [n for n in PAPER_GRAPH_SHA256 if force or not _installed(target, n)]
    status = {n: "present" for n in PAPER_GRAPH_SHA256 if n not in todo}
    if not todo:
        return status
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    except OSError as exc:
        raise write_error(target, exc, "cannot install into", "") from None
    deadline = time.monotonic() + deadline_s
    try:
        for name in todo:
            staged = staging / name
            try:
                with open(staged, "wb") as fh:
                    if from_dir is not None:
                        origin = str(Path(from_dir) / name)
                        fh.write(_read_local(Path(from_dir), name, max_bytes))
                    else:
                        origin = paper_graph_url(name, base_url)
                        _download(origin, timeout_s, deadline, max_bytes, fh, deadline_s)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise write_error(staged, exc, "cannot stage", "; nothing installed") from None
            got, want = sha256_of(staged.read_bytes()), PAPER_GRAPH_SHA256[name]
            if got != want:
                raise DataError(
                    f"{origin}: sha256 {got[:16]}... differs from the pinned {want[:16]}... "
                    f"(commit {PAPER_COMMIT[:10]}); nothing installed"
                )
        note = (
            f"Files of github.com/{PAPER_REPO}, folder {PAPER_FOLDER}/, commit {PAPER_COMMIT}\n"
            "License: CC BY 4.0, (c) the DOPPLER paper's authors.\n"
            "Installed by `doppler-lab data paper-graphs` (sha256 checked).\n"
        )
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(target, exc, "cannot install into", "") from None
        for name in todo:
            atomic_copy(staging / name, target / name)  # checked bytes, each file atomically
            status[name] = "installed"
        atomic_write(target / SOURCE_NOTE, note)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {n: status[n] for n in PAPER_GRAPH_SHA256}


__all__ = [
    "BASE_URL_ENV",
    "PAPER_COMMIT",
    "PAPER_GRAPH_SHA256",
    "PAPER_REPO",
    "install_paper_graphs",
    "paper_graph_url",
]

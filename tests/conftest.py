"""Shared fixtures: the paper's released graphs (read from ../shared when present), markers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from paper_graphs import paper_dir_or_skip  # noqa: E402  (tests/ is on sys.path)


@pytest.fixture(scope="session")
def paper_dir() -> Path:
    return paper_dir_or_skip()


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover
        return False


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs CUDA (marker gpu)")
    skip_browser = pytest.mark.skip(reason="needs Chromium (marker browser)")
    has_cuda = None
    has_chromium = None
    for item in items:
        if "gpu" in item.keywords:
            has_cuda = _cuda() if has_cuda is None else has_cuda
            if not has_cuda:
                item.add_marker(skip_gpu)
        if "browser" in item.keywords:
            has_chromium = (_chromium() is not None) if has_chromium is None else has_chromium
            if not has_chromium:
                item.add_marker(skip_browser)


# -- cached training runs over code versions (test_adopt_runs, test_runstore) ------------------
@pytest.fixture
def version(monkeypatch):
    """Set the code version the package reports: ``version("aaaaaaaaaaaa")``."""
    from doppler_lab.house import codeversion

    def set_to(v: str) -> None:
        monkeypatch.setattr(codeversion, "code_version", lambda package_dir=None: v)

    return set_to


@pytest.fixture
def trained(monkeypatch):
    """The seeds of the ``bench policy`` runs that train (``run_pipeline`` calls), in order."""
    from doppler_lab.lab.bench import policy as bench_policy

    calls: list[int] = []
    real = bench_policy.run_pipeline

    def counted(stages, *a, **k):
        calls.append(stages[0].seed)
        return real(stages, *a, **k)

    monkeypatch.setattr(bench_policy, "run_pipeline", counted)
    return calls

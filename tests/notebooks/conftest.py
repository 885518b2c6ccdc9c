"""Notebook tests: execute with papermill and tiny parameters, then assert on summary.json.

Each notebook ``notebooks/NN_name.ipynb`` has its own ``tests/notebooks/test_NN_name.py`` that
calls the ``run_notebook`` fixture; ``test_layout.py`` checks that every notebook is covered and
stored clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from doppler_lab.experiments import NOTEBOOKS_DIR
from doppler_lab.experiments import run_notebook as _run


@pytest.fixture
def run_notebook(tmp_path: Path):
    """``run_notebook("00_quickstart.ipynb", **params) -> summary dict``."""

    def run(name: str, **params):
        return _run(NOTEBOOKS_DIR / name, tmp_path / Path(name).stem, params, timeout_s=600)

    return run

"""Torch on one thread for the training tests (see tests/policies/torch_threads.py)."""

from __future__ import annotations

import pytest
from policies.torch_threads import one_thread

one_torch_thread = pytest.fixture(autouse=True, scope="module")(one_thread)

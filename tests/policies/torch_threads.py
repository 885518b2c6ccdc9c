"""A fixture body shared by the policy and training tests: torch on one thread (the tensors are
tiny, and spinning OpenMP threads on a busy machine make them slower, not faster)."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def one_thread() -> Iterator[None]:
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

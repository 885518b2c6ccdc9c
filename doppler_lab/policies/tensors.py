"""Small torch helpers shared by the policies and the trainer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor


def as_tensor(a: np.ndarray) -> Tensor:
    """A torch-owned copy of ``a``.

    Tensors over numpy memory have arbitrary alignment, and some CPU kernels (vectorised
    reductions) sum in an alignment-dependent order: copying makes training bit-reproducible.
    """
    return torch.from_numpy(np.ascontiguousarray(a)).clone()


@contextlib.contextmanager
def flush_denormal() -> Iterator[None]:
    """Flush denormal floats to zero inside the block (restored to off after it).

    Tiny gradients and Adam moments become denormal during training and make CPU kernels
    (scatter, GRU, tanh) up to 100x slower; every rollout and training loop runs inside this.
    """
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@contextlib.contextmanager
def keep_torch_threads() -> Iterator[None]:
    """Restore torch's intra-op thread count after the block.

    The simulator's parallel numba kernels share the OpenMP runtime with torch and reset its
    thread count; this keeps a run's torch arithmetic on the threads it was given (results of
    reductions depend on the thread count).
    """
    n = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)

"""A counting stand-in for the CUDA stream and event API, so that a CPU can run
:class:`~doppler_lab.executor.streams.CudaApi` and count the host's CUDA calls per op.

Streams are tokens, events complete after ``lag`` queries and take their time from the host
clock, tensors stay on the CPU. :func:`fake_cuda` patches the streams module's ``torch`` for a
test; ``calls`` counts ``record``, ``query``, ``set_stream``, ``elapsed`` and ``record_stream``.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import types
from collections import Counter
from typing import Any

import torch


class _FakeTorch:
    """``torch`` but for its CUDA parts (and ``device``/``empty_like``, which keep to the CPU)."""

    def __init__(self, cuda: Any, c: Any):
        self.cuda, self._C = cuda, c

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def device(*args: Any, **kwargs: Any) -> torch.device:
        return torch.device("cpu")

    @staticmethod
    def empty_like(x: torch.Tensor, device: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.empty_like(x, **kwargs)


def make_fake(lag: int = 1) -> tuple[_FakeTorch, Counter]:
    calls: Counter = Counter()
    ids = itertools.count(1)

    class Stream:
        def __init__(self, device: Any = None):
            self.stream_id, self.device_index, self.device_type = next(ids), 0, 1

    class Event:
        def __init__(self, enable_timing: bool = False):
            self.t, self.polls = float("nan"), 0

        def record(self, stream: Any = None) -> None:
            calls["record"] += 1
            self.t, self.polls = time.perf_counter(), 0

        def query(self) -> bool:
            calls["query"] += 1
            self.polls += 1
            return self.polls > lag

        def elapsed_time(self, other: Any) -> float:
            calls["elapsed"] += 1
            return (other.t - self.t) * 1e3

    def set_stream(stream: Any) -> None:
        calls["set_stream"] += 1

    cuda = types.SimpleNamespace(
        Stream=Stream,
        Event=Event,
        set_stream=set_stream,
        current_stream=lambda device=None: Stream(),
        current_device=lambda: 0,
        set_device=lambda d: None,
        device=lambda d: contextlib.nullcontext(),
        is_available=lambda: True,
        device_count=lambda: 2,
    )
    c = types.SimpleNamespace(
        _cuda_setStream=lambda stream_id, device_index, device_type: set_stream(None)
    )
    return _FakeTorch(cuda, c), calls


@contextlib.contextmanager
def fake_cuda(monkeypatch: Any, lag: int = 1):
    """Patch :mod:`doppler_lab.executor.streams` onto the fake; yields the call counter."""
    from doppler_lab.executor import streams

    fake, calls = make_fake(lag)
    monkeypatch.setattr(streams, "torch", fake)

    def record_stream(self: torch.Tensor, stream: Any) -> None:
        calls["record_stream"] += 1

    monkeypatch.setattr(torch.Tensor, "record_stream", record_stream)
    yield calls

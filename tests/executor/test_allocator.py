"""CPU workers keep the memory they free (doppler_lab.executor.allocator)."""

from __future__ import annotations

import pytest

from doppler_lab.executor import allocator
from doppler_lab.executor.cpu import CpuBackend
from doppler_lab.house.errors import ConfigError


class FakeLibc:
    """Records mallopt calls; answers ``result``."""

    def __init__(self, result: int = 1):
        self.calls: list[tuple[int, int]] = []
        self.result = result

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.result

    def gnu_get_libc_version(self) -> bytes:
        return b"2.36"


@pytest.fixture
def fresh(monkeypatch):
    """A process state in which nothing was set yet, and a fake C library."""
    monkeypatch.setattr(allocator, "_state", {"allocator": "system"})
    lib = FakeLibc()
    monkeypatch.setattr(allocator, "_glibc", lambda: lib)
    return lib


def test_holds_freed_memory_once(fresh):
    state = allocator.hold_freed_memory()
    assert state == {"allocator": "held", "hold_bytes": allocator.HOLD_BYTES}
    assert fresh.calls == [
        (allocator._M_MMAP_THRESHOLD, allocator.HOLD_BYTES),
        (allocator._M_TRIM_THRESHOLD, allocator.HOLD_BYTES),
    ]
    assert allocator.hold_freed_memory() == state
    assert len(fresh.calls) == 2  # the settings are process-wide: made once
    assert allocator.allocator_state()["allocator"] == "held"


def test_refused_settings_are_reported(fresh):
    fresh.result = 0
    state = allocator.hold_freed_memory()
    assert state["allocator"] == "system"
    assert "refused" in state["why"]


def test_without_glibc_nothing_is_set(monkeypatch):
    monkeypatch.setattr(allocator, "_state", {"allocator": "system"})
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    state = allocator.hold_freed_memory()
    assert state["allocator"] == "system"
    assert "glibc" in state["why"]
    assert allocator.glibc_present() is False


def test_environment_chooses(monkeypatch):
    monkeypatch.delenv(allocator.ENV, raising=False)
    assert allocator.wanted() is True
    monkeypatch.setenv(allocator.ENV, "system")
    assert allocator.wanted() is False
    monkeypatch.setenv(allocator.ENV, "Held")
    assert allocator.wanted() is True
    monkeypatch.setenv(allocator.ENV, "cached")
    with pytest.raises(ConfigError, match=r"DOPPLER_LAB_CPU_ALLOCATOR='cached'.*'held'.*'system'"):
        allocator.wanted()


def test_cpu_backend_holds_by_default_and_says_so(fresh, monkeypatch):
    monkeypatch.delenv(allocator.ENV, raising=False)
    be = CpuBackend(2)
    try:
        assert be.describe()["allocator"] == "held"
        assert len(fresh.calls) == 2
    finally:
        be.close()


def test_cpu_backend_can_keep_the_system_policy(fresh, monkeypatch):
    monkeypatch.setenv(allocator.ENV, "system")
    be = CpuBackend(2)
    try:
        assert be.describe()["allocator"] == "system"
        assert fresh.calls == []
    finally:
        be.close()
    be = CpuBackend(2, hold_memory=False)
    try:
        assert fresh.calls == [] and be.describe()["allocator"] == "system"
    finally:
        be.close()


def test_the_real_library_takes_the_settings():
    """On this machine's C library (glibc on Linux CI): the settings are accepted."""
    if not allocator.glibc_present():
        pytest.skip("not glibc")
    assert allocator.hold_freed_memory()["allocator"] == "held"

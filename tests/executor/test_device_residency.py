"""Device bugs caught without a GPU: the ``inline-strict`` backend tags every tensor with the
logical device that made it and applies CUDA's residency rules (``executor/residency.py``).

Before it existed, three defects passed every CPU test and failed on the first real GPU: the
generators' constants (``torch.arange`` ... in the rope tables) were made on the host, so the
first einsum mixing them with device tensors raised; copying such a host tensor failed in
``record_stream``; and one-GPU clusters were refused. Each has a test here that fails when the
defect comes back.
"""

from __future__ import annotations

import contextlib

import pytest

from doppler_lab.executor import Executor, make_backend
from doppler_lab.executor.streams import InlineApi
from doppler_lab.house.errors import ExecutorError
from doppler_lab.ir.placement import round_robin

from executor_helpers import (
    TINY_SCALE,
    TINY_WORKLOADS,
    USER_MODEL_SOURCE,
    ZOO_SPECS,
    check_all,
    toy_graph,
)


@pytest.fixture(scope="module")
def strict3():
    backend = make_backend("inline-strict", 3)
    yield backend
    backend.close()


@pytest.mark.parametrize("name", TINY_WORKLOADS)
def test_every_generator_under_every_placement(strict3, name):
    from doppler_lab.workloads import build

    check_all(build(name, scale=TINY_SCALE), strict3)


@pytest.mark.parametrize("spec", ZOO_SPECS)
def test_every_zoo_model_under_every_placement(strict3, spec):
    from doppler_lab.importers.zoo import import_model

    check_all(import_model(spec), strict3)


def test_a_user_file_model_under_every_placement(strict3, tmp_path):
    from doppler_lab.importers.zoo import import_model

    src = tmp_path / "user_model.py"
    src.write_text(USER_MODEL_SOURCE)
    check_all(import_model(f"{src}:build"), strict3)


@pytest.mark.parametrize("name", ["llama_block", "moe_layer"])
def test_one_device_clusters_are_valid(name):
    from doppler_lab.workloads import build

    backend = make_backend("inline-strict", 1)
    assert backend.cluster.num_devices == 1
    check_all(build(name, scale=TINY_SCALE), backend)


# -- the checks themselves: each defect is caught ------------------------------------------------
def test_a_constant_made_on_the_host_is_caught(monkeypatch):
    """The executor used to call constants without a device scope (CUDA: made on the host)."""
    from doppler_lab.workloads import build

    monkeypatch.setattr(InlineApi, "scope", lambda self, d: contextlib.nullcontext())
    g = build("llama_block", scale=TINY_SCALE)
    with Executor(g, make_backend("inline-strict", 3)) as ex, pytest.raises(ExecutorError) as info:
        ex.run(round_robin(g, 3))
    msg = str(info.value)
    assert "'rope." in msg and "lives on the host" in msg


def test_a_copy_of_a_tensor_on_another_device_is_caught(monkeypatch):
    """A copy whose source is not on the sending device (CUDA: ``record_stream`` on a host
    tensor, or a wrong-device read) is refused, naming the tensor's op and both devices."""
    from doppler_lab.executor import residency

    g = toy_graph(layers=2, size=8)
    backend = make_backend("inline-strict", 2)
    real_place = InlineApi.place

    def host_input(self, x, d):  # materialise inputs on the host: the first op must refuse them
        y = real_place(self, x, d)
        residency.tag(y, residency.HOST)
        return y

    monkeypatch.setattr(InlineApi, "place", host_input)
    with Executor(g, backend) as ex, pytest.raises(ExecutorError) as info:
        ex.run(round_robin(g, 2))
    assert "lives on the host, not device" in str(info.value)
    monkeypatch.setattr(InlineApi, "place", real_place)

    api = backend.api
    x = api.place(__import__("torch").ones(3), 1)
    with pytest.raises(residency.ResidencyError, match="copy from device 0 reads a tensor"):
        api.copy(x, 0, 1, api.event(0), api.event(0))


def test_an_op_mixing_two_devices_raises_as_cuda_does():
    import torch

    from doppler_lab.executor.residency import ResidencyCheck, ResidencyError, tag, tag_of

    a, b = tag(torch.ones(2, 2), 0), tag(torch.ones(2, 2), 1)
    mode = ResidencyCheck()
    with mode:
        assert tag_of(a @ a) == 0
        assert tag_of(a * torch.tensor(2.0)) == 0  # a 0-dim host scalar is allowed
        with pytest.raises(ResidencyError, match="device 0 and device 1"):
            torch.einsum("ij,jk->ik", a, b)
        assert tag_of(torch.arange(3)) == -1  # a factory outside a scope: the host
        with mode.scope(1):
            assert tag_of(torch.eye(2)) == 1
        assert tag_of(a.cpu()) == -1 and tag_of(a.to("cpu")) == -1
        assert tag_of(a.to(torch.float64)) == 0

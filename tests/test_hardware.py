"""Clusters, presets, the cost model and the lower bound."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import PRESETS, Cluster, Device, make_cluster
from doppler_lab.house.errors import ClusterError, GraphError
from doppler_lab.io.documents import load_cluster, save_cluster
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.timing.cost_model import CostModel, lower_bound


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip(name, tmp_path):
    c = make_cluster(name)
    path = save_cluster(c, tmp_path / "c.json")
    c2 = load_cluster(path)
    assert c2.num_devices == c.num_devices and c2.name == c.name
    np.testing.assert_array_equal(c2.routes, c.routes)
    np.testing.assert_allclose(c2.bandwidth_bytes_per_s, c.bandwidth_bytes_per_s)
    assert c2.link_names == c.link_names


def test_preset_memory():
    """Per-device capacity: datasheet GPUs, this machine's memory for CPU workers, no cap for
    the abstract uniform devices; files keep it, and a file without it is unconstrained."""
    from doppler_lab.hardware.cluster import host_memory_bytes
    from doppler_lab.hardware.gpu_specs import match_spec

    assert {d.memory_bytes for d in make_cluster("p100x4").devices} == {16e9}
    assert {d.memory_bytes for d in make_cluster("v100x8").devices} == {32e9}
    assert {d.memory_bytes for d in make_cluster("h100x8").devices} == {80e9}
    assert match_spec("NVIDIA A100-SXM4-80GB", 80e9).memory_bytes == 80e9
    assert match_spec("NVIDIA H200", 141e9).memory_bytes == 141e9
    host = host_memory_bytes()
    assert 0 < host < float("inf")
    assert [d.memory_bytes for d in make_cluster("cpu", 2).devices] == [host / 2] * 2
    assert make_cluster("multihost:hosts=2,devices=4").devices[0].memory_bytes == host / 4
    assert make_cluster("uniform", 2).devices[0].memory_bytes == float("inf")


def test_cluster_files_without_memory_are_unconstrained(tmp_path):
    import json

    path = save_cluster(make_cluster("p100x4"), tmp_path / "c.json")
    doc = json.loads(path.read_text())
    assert doc["devices"][0]["memory_bytes"] == 16e9
    del doc["devices"][0]["memory_bytes"]
    doc["devices"][1]["memory_bytes"] = None
    path.write_text(json.dumps(doc))
    c = load_cluster(path)
    assert [d.memory_bytes for d in c.devices] == [float("inf")] * 2 + [16e9] * 2
    again = load_cluster(save_cluster(c, tmp_path / "c2.json"))
    assert [d.memory_bytes for d in again.devices] == [d.memory_bytes for d in c.devices]
    assert json.loads((tmp_path / "c2.json").read_text())["devices"][0]["memory_bytes"] is None
    with pytest.raises(ClusterError, match="memory_bytes"):
        Device("d", memory_bytes=0.0)


def test_v100_cube_mesh_has_six_nvlinks_per_gpu():
    c = make_cluster("v100x8")
    nv = c.bandwidth_bytes_per_s > 20e9
    np.fill_diagonal(nv, False)
    assert (nv.sum(axis=1) == 4).all()  # four NVLink neighbours, two of them doubled
    links = np.rint(np.where(nv, c.bandwidth_bytes_per_s / 25e9, 0)).sum(axis=1)
    assert (links == 6).all()
    assert np.array_equal(nv, nv.T)


def test_p100_transfers_share_ports():
    c = make_cluster("p100x4")
    assert c.routes[0, 1].tolist() == [0, 5] and c.routes[2, 1].tolist() == [2, 5]


def test_bad_clusters():
    with pytest.raises(
        ClusterError, match=r"bandwidth_bytes_per_s has shape \(2, 2\), expected \(3, 3\)"
    ):
        Cluster("x", tuple(Device(f"d{i}") for i in range(3)), np.ones((2, 2)), np.zeros((3, 3)))
    with pytest.raises(ClusterError, match="bandwidth 0->1 is 0.0"):
        Cluster("x", (Device("a"), Device("b")), np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ClusterError, match="unknown cluster 'tpu'"):
        make_cluster("tpu")
    with pytest.raises(ClusterError, match="has 8 devices, not 4"):
        make_cluster("v100x8", 4)
    with pytest.raises(ClusterError, match="flops_per_s"):
        Device("d", flops_per_s={"float32": -1.0})


def test_cost_model_roofline_and_explicit_costs():
    b = GraphBuilder("mm")
    x = b.add_input("x", (1024, 1024))
    w = b.add_input("w", (1024, 1024))
    y = b.add_einsum("y", "ij,jk->ik", [x, w])
    g = b.build()
    c = make_cluster("p100x4")
    cm = CostModel(g, c)
    expected = 2 * 1024**3 / 9.3e12 + 5e-6
    np.testing.assert_allclose(cm.compute[y], expected)
    assert (cm.compute[[x, w]] == 0).all()
    # transfers out of inputs are free; y has no consumers
    assert cm.transfer_time(0, 0, 1) == 0.0
    het = GraphBuilder("het")
    het.add_node("a", cost=[1.0, 2.0])
    with pytest.raises(
        GraphError, match="per-device costs for 2 devices, but cluster 'p100x4' has 4"
    ):
        CostModel(het.build(), c)


def test_lower_bound_is_max_of_critical_path_and_work():
    b = GraphBuilder("chain")
    prev = b.add_node("a", cost=4.0)
    for i in range(3):
        prev = b.add_node(f"n{i}", cost=4.0, inputs=[prev], edge_costs=[100.0])
    g = b.build()
    assert lower_bound(g, make_cluster("uniform", 2)) == 16.0  # chain: critical path
    b2 = GraphBuilder("wide")
    for i in range(8):
        b2.add_node(f"n{i}", cost=3.0)
    assert lower_bound(b2.build(), make_cluster("uniform", 4)) == 6.0  # work / devices

"""One-device clusters are valid: every factory builds one, it round-trips and simulates (issue 34:
``make_backend("cuda")`` on one GPU failed with "2 link names for 0 link resources")."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import (
    Cluster,
    make_cluster,
    make_cpu,
    make_multihost,
    make_uniform,
    parse_multihost,
    switch_routes,
)
from doppler_lab.hardware.gpu_specs import gpu_device
from doppler_lab.io.documents import load_cluster, save_cluster
from doppler_lab.placers import place
from doppler_lab.timing.sim import simulate
from doppler_lab.workloads import build

ONE_DEVICE = {
    "cpu(1)": lambda: make_cpu(1),
    "uniform(1)": lambda: make_uniform(1),
    "make_cluster cpu 1": lambda: make_cluster("cpu", 1),
    "make_cluster uniform 1": lambda: make_cluster("uniform", 1),
    "p100x4.first(1)": lambda: make_cluster("p100x4").first(1),
    "v100x8.first(1)": lambda: make_cluster("v100x8").first(1),
    "h100x8.first(1)": lambda: make_cluster("h100x8").first(1),
    "multihost 1x1 cpu": lambda: make_multihost(1, 1),
    "multihost 1x1 gpu": lambda: make_multihost(1, 1, kind="gpu"),
    "multihost spec 1x1 gpu": lambda: parse_multihost("multihost:hosts=1,devices=1,kind=gpu"),
    "multihost(2, 2).first(1)": lambda: make_multihost(2, 2).first(1),
    "switch_routes(1)": lambda: Cluster(
        "switch1", (make_cpu(1).devices[0],), np.ones((1, 1)), np.zeros((1, 1)),
        *switch_routes(1, "gpu"),
    ),
    "gpu_device + switch_routes(1) (the cuda1 cluster)": lambda: Cluster(
        "cuda1", (gpu_device("NVIDIA H200:0", "NVIDIA H200", 150e9),), np.full((1, 1), 50e9),
        np.full((1, 1), 10e-6), *switch_routes(1, "gpu"),
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def graph():
    return build("ffnn", scale=0.05)


def _links_consistent(c: Cluster) -> None:
    used = c.routes[c.routes >= 0]
    assert c.num_links == (int(used.max()) + 1 if used.size else 0)
    assert len(c.link_names) == c.num_links


@pytest.mark.parametrize("name", list(ONE_DEVICE))
def test_one_device_cluster_builds_round_trips_and_simulates(name, graph, tmp_path):
    c = ONE_DEVICE[name]()
    assert c.num_devices == 1
    assert c.num_links == 0 and c.link_names == ()
    assert (c.routes == -1).all()
    _links_consistent(c)
    back = load_cluster(save_cluster(c, tmp_path / "c.json"))
    assert back.num_devices == 1 and back.link_names == ()
    placement = np.zeros(graph.num_nodes, dtype=np.int64)
    for semantics in ("paper", "wc"):
        span = simulate(graph, c, placement, semantics=semantics).makespan
        assert np.isfinite(span) and span > 0
    for placer in ("single", "round-robin", "cp", "heft"):
        assert (place(placer, graph, c, seed=0).device == 0).all()


@pytest.mark.parametrize("d", [0, 1, 2, 3, 8])
def test_switch_routes_names_every_resource_it_uses(d):
    routes, names = switch_routes(d, "p")
    assert routes.shape == (d, d, 2)
    used = routes[routes >= 0]
    assert len(names) == (int(used.max()) + 1 if used.size else 0)
    if d >= 2:
        assert routes[0, 1].tolist() == [0, d + 1]
        assert names[0] == "p0 out" and names[d + 1] == "p1 in"
        assert set(used.tolist()) == set(range(2 * d))


@pytest.mark.parametrize(
    "hosts, per_host, kind", [(2, 1, "cpu"), (2, 1, "gpu"), (1, 2, "cpu"), (1, 2, "gpu")]
)
def test_multihost_has_no_unused_link_resources(hosts, per_host, kind):
    c = make_multihost(hosts, per_host, kind=kind)
    _links_consistent(c)
    used = set(c.routes[c.routes >= 0].tolist())
    assert used == set(range(c.num_links))
    # hosts with one device each talk through their NICs only
    if per_host == 1:
        assert all("nic" in n for n in c.link_names)

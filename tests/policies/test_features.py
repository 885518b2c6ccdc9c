"""Node/edge features, path tables and device features."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.placers.clustering import ClusteringModel
from doppler_lab.policies.features import (
    LAYOUTS,
    cluster_arrays,
    device_features,
    get_layout,
    graph_features,
    normalize_device_features,
    pointer_doubling,
)
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.schedule import ListScheduleState


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_graph_feature_shapes(small_graph, cluster4, layout):
    lay = get_layout(layout)
    f = graph_features(small_graph, CostModel(small_graph, cluster4), lay)
    n = small_graph.compute_nodes.size
    e = int((~small_graph.is_input[small_graph.edge_src]).sum())
    assert f.num_nodes == n
    assert f.x.shape == (n, lay.node_dim) and f.x.dtype == np.float32
    assert f.edge_index.shape == (2, 2 * e)
    assert f.edge_attr.shape == (2 * e, lay.edge_dim)
    assert np.allclose(f.x.mean(axis=0), 0, atol=1e-5)
    assert sorted(f.topo.tolist()) == list(range(n))
    np.testing.assert_array_equal(f.nodes[f.local[f.nodes]], f.nodes)
    assert (f.local[small_graph.is_input] == -1).all()


def _naive_path_sum(nxt: np.ndarray, x: np.ndarray) -> np.ndarray:
    n = nxt.size
    out = np.zeros_like(x)
    for i in range(n):
        j = i
        while j != n:
            out[i] += x[j]
            j = nxt[j]
    return out


def test_pointer_doubling_sums_along_chains():
    rng = np.random.default_rng(0)
    n = 50
    nxt = np.array([rng.integers(i + 1, n + 1) for i in range(n)])  # a forest towards n
    x = rng.normal(size=(n, 3))
    s = np.vstack([x, np.zeros((1, 3))])
    for j in pointer_doubling(nxt):
        s = s + s[j]
    np.testing.assert_allclose(s[:-1], _naive_path_sum(nxt, x))


def test_paths_follow_critical_successors(paper_chain):
    cm = CostModel(paper_chain, make_cluster("uniform", 4))
    f = graph_features(paper_chain, cm, get_layout("doppler5"))
    # summing the node costs along the b-level path gives the b-level minus the edge costs,
    # so with zero edge costs the sums equal the b-levels
    g0 = paper_chain.with_costs(paper_chain.compute_cost, np.zeros(paper_chain.num_edges))
    f0 = graph_features(g0, CostModel(g0, make_cluster("uniform", 4)), get_layout("doppler5"))
    w = g0.compute_cost
    s = np.append(w, 0.0)
    for j in f0.b_jumps:
        s = s + s[j]
    np.testing.assert_allclose(s[:-1], f0.b_level)
    assert len(f.b_jumps) >= 1 and len(f.t_jumps) >= 1


def test_device_features_and_normalisation(small_graph, cluster4):
    cm = CostModel(small_graph, cluster4)
    st = ListScheduleState(small_graph, cm, "est")
    while st.num_assigned < 5:
        v = int(st.candidates()[0])
        st.assign(v, st.num_assigned % 4)
    v = int(st.candidates()[0])
    f5 = device_features(st, v, get_layout("doppler5"))
    f8 = device_features(st, v, get_layout("doppler9"))
    assert f5.shape == (4, 5) and f8.shape == (4, 9)
    np.testing.assert_array_equal(f8[:, :5], f5)
    est = st.est(v)
    # the wait-transfer feature is the sum of transfers from predecessors on other devices
    wait = np.zeros(4)
    for u, e in zip(small_graph.predecessors(v), small_graph.pred_eid[small_graph.pred_ptr[v] :]):
        if small_graph.is_input[u]:
            continue
        for d in range(4):
            wait[d] += cm.transfer_time(int(e), int(st.device[u]), d)
    np.testing.assert_allclose(f8[:, 5], wait)
    assert f8[:, 7].sum() >= 1 and f8[np.argmin(est), 7] == 1
    z = normalize_device_features(f5, get_layout("doppler5"), 1.0)
    assert z.dtype == np.float32 and np.allclose(z.mean(axis=0), 0, atol=1e-5)
    s = normalize_device_features(f8[None], get_layout("doppler9"), 2.0)
    assert s.shape == (1, 4, 9) and np.isclose(s[0, :, 4].min(), 0)


def test_unknown_layout():
    with pytest.raises(ConfigError, match="doppler5"):
        get_layout("nope")


def test_cluster_share_is_the_placed_mates_compute_by_device(paper_chain):
    """``doppler10``'s last column: the share of the compute of the node's clustering mates
    already placed that is on each device; 0 while none is placed; columns 0-8 are doppler9's."""
    g = paper_chain
    cm = CostModel(g, make_cluster("uniform", 4))
    root, _ = ClusteringModel(g, cm).clusters()
    of, ptr, members = cluster_arrays(g, cm)
    comp = g.compute_nodes
    # the same partition as the clustering's roots, members listed per cluster
    for c in range(ptr.size - 1):
        mates = members[ptr[c] : ptr[c + 1]]
        assert (of[mates] == c).all() and np.unique(root[mates]).size == 1
    assert sorted(members.tolist()) == sorted(comp.tolist()) and (of[g.is_input] == -1).all()
    big = int(np.argmax(np.bincount(of[comp])))
    mates = members[ptr[big] : ptr[big + 1]]
    assert mates.size >= 3
    st = ListScheduleState(g, cm, "paper")
    lay10 = get_layout("doppler10")
    extra = graph_features(g, cm, lay10).extra
    rng = np.random.default_rng(0)
    seen_none = seen_some = False
    while not st.done:
        v = int(st.candidates()[0])
        f10 = device_features(st, v, lay10, None, extra)
        np.testing.assert_array_equal(f10[:, :9], device_features(st, v, get_layout("doppler9")))
        placed = [u for u in members[ptr[of[v]] : ptr[of[v] + 1]] if st.device[u] >= 0]
        if not placed:
            seen_none = True
            np.testing.assert_array_equal(f10[:, 9], 0.0)
        else:
            seen_some = True
            w = cm.mean_compute[placed]
            want = np.bincount(st.device[placed], weights=w, minlength=4) / w.sum()
            np.testing.assert_allclose(f10[:, 9], want)
        st.assign(v, int(rng.integers(4)))
    assert seen_none and seen_some
    # unit-free in the scaled norm, like the shares
    s = normalize_device_features(f10[None], lay10, 1e6)
    np.testing.assert_allclose(s[0, :, 9], f10[:, 9].astype(np.float32))


def test_cluster_share_has_singleton_clusters_on_big_graphs(small_graph, cluster4, monkeypatch):
    import doppler_lab.placers.clustering as clustering

    monkeypatch.setattr(clustering, "CLUSTER_MAX_OPS", 3)
    of, ptr, members = cluster_arrays(small_graph, CostModel(small_graph, cluster4))
    assert np.all(np.diff(ptr) == 1) and of.max() + 1 == small_graph.compute_nodes.size

"""A graph on a cluster, prepared once for a policy: features, tensors, teacher, episodes."""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from ..hardware.cluster import Cluster, make_cluster
from ..ir.graph import DataflowGraph
from ..placers.critical_path import CriticalPathTeacher
from ..timing.cost_model import CostModel
from ..timing.episode import Episode
from ..timing.schedule import Estimate
from .features import (
    FeatureArgs,
    FeatureLayout,
    device_features,
    get_layout,
    graph_features,
    hint_devices,
    hint_name,
    normalize_device_features,
    uses_clustering_device,
)
from .tensors import as_tensor

if TYPE_CHECKING:
    from .policy_config import PolicyConfig


class GraphContext:
    """Everything about one graph on one cluster that a policy reads, built once.

    Args:
        graph: the graph.
        cluster: a :class:`Cluster` or a preset name.
        layout: the feature layout (or its name).
        estimate: the episode state's estimate.
        hint: the heuristic whose devices a layout with the clustering's device (``doppler12``)
            reads (True: the clustering's; ``partition``; False: none, the feature is 0
            everywhere, the policy places without a hint; :func:`~doppler_lab.policies.features.hint_name`).

    Attributes:
        features: the static :class:`~doppler_lab.policies.features.GraphFeatures`.
        x, edge_index, edge_attr: torch tensors of the node features and message edges.
        b_jumps, t_jumps: pointer-doubling tables as torch index tensors.
        teacher: the Critical Path rules on this graph.
        hinted_devices: the hinted heuristic's device per node (None without a hint).
        cache: static data that a policy kind derives from the graph, built on first use.
    """

    def __init__(
        self,
        graph: DataflowGraph,
        cluster: Cluster | str,
        layout: FeatureLayout | str,
        estimate: Estimate = "est",
        hint: bool | str | None = True,
    ):
        self.graph = graph
        self.cluster = make_cluster(cluster) if isinstance(cluster, str) else cluster
        self.layout = get_layout(layout) if isinstance(layout, str) else layout
        self.estimate: Estimate = estimate
        self.cost = CostModel(graph, self.cluster)
        self.hint = hint_name(hint)  # the heuristic's name, or None
        self.features = graph_features(graph, self.cost, self.layout, hint)
        self.teacher = CriticalPathTeacher(graph, self.cost)
        f = self.features
        self.x = as_tensor(f.x)
        self.edge_index = as_tensor(f.edge_index)
        self.edge_attr = as_tensor(f.edge_attr)
        self.b_jumps = [as_tensor(j) for j in f.b_jumps]
        self.t_jumps = [as_tensor(j) for j in f.t_jumps]
        self.topo_global = f.nodes[f.topo]
        self.cache: dict[str, Any] = {}  # per-policy-kind static data (e.g. Placeto's groups)

    @classmethod
    def for_policy(
        cls,
        graph: DataflowGraph,
        cluster: Cluster | str,
        config: PolicyConfig,
        semantics: str | None,
        hint: bool | str | None = True,
    ) -> GraphContext:
        """The context a policy of ``config`` reads on a task judged under ``semantics``: its
        layout, and its estimate for that semantics
        (:meth:`~doppler_lab.policies.policy_config.PolicyConfig.context_estimate`);
        ``hint``: see the class."""
        return cls(graph, cluster, config.layout, config.context_estimate(semantics), hint)

    def with_hint(self, hint: bool | str | None) -> GraphContext:
        """This context with another ``hint`` (see the class): a shallow copy whose features
        carry the other heuristic's devices; nothing else a policy reads depends on the hint,
        so the rest (node features, tensors, the teacher, ``cache``) is shared, not rebuilt.
        Itself when the hint is the same; with a layout that reads no hint, only ``hint``
        differs."""
        name = hint_name(hint)
        if name == self.hint:
            return self
        other = copy.copy(self)
        other.hint = name
        if uses_clustering_device(self.layout):
            extra = FeatureArgs(*self.features.extra)._replace(
                heuristic=hint_devices(self.graph, self.cost, name)
            )
            other.features = dataclasses.replace(self.features, extra=tuple(extra))
        return other

    @property
    def hinted_devices(self) -> np.ndarray | None:
        """``(N,)`` the device the hinted heuristic gives each node, as the features carry it
        (``heuristic`` of :class:`~doppler_lab.policies.features.FeatureArgs`, by
        :func:`~doppler_lab.policies.features.hint_devices`: -1 everywhere where the heuristic
        gives none, e.g. above its op limit); None without a hint, or with a layout that reads
        none (no ``clustering_device``: its features carry no devices)."""
        if self.hint is None or not uses_clustering_device(self.layout):
            return None
        return FeatureArgs(*self.features.extra).heuristic

    @property
    def num_nodes(self) -> int:
        """Compute nodes (= steps of an episode)."""
        return self.features.num_nodes

    @property
    def num_devices(self) -> int:
        return self.cluster.num_devices

    def new_episode(self) -> Episode:
        """A fresh :class:`~doppler_lab.timing.episode.Episode` of the graph (the policy's estimate)."""
        return Episode(self.graph, self.cost, self.estimate)

    def raw_device_features(self, episode: Episode, v: int, est: np.ndarray) -> np.ndarray:
        """The layout's device features of global node ``v``, raw units, ``(D, F_dev)``."""
        return device_features(episode, v, self.layout, est, self.features.extra)

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """Normalise raw device features ``(..., D, F)`` for the policy."""
        return normalize_device_features(raw, self.layout, self.features.time_unit)

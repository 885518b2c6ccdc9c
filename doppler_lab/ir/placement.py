"""Placements: a device per node and, optionally, a priority order, with what made them
(:class:`PlacementMeta`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..house.errors import PlacementError
from ..house.jsonutil import to_jsonable
from ..house.validate import show
from .graph import DataflowGraph


@dataclass(frozen=True, eq=False)
class PlacementMeta(Mapping[str, Any]):
    """What a placer says about its placement: the fields that ``place``, the explorer and the
    report pages read, typed, and the placer's own notes in :attr:`extra`.

    It reads as the mapping it replaces (``meta["sim_calls"]``, ``meta.get("source")``,
    ``{**meta, ...}``), holding the keys that were given, in their order (so a placement file
    is written as before); a typed field not given reads as absent, not as None.

    Attributes:
        produced_by: what produced the placement, in words: the winning candidate's label of a
            learned placer (``greedy rollout``, ``sample 3``, ``proposal clustering``,
            ``proposal partition 2``, ``memory baseline m-sct``, ``search from sample 3``,
            ...; :class:`~doppler_lab.search.proposals.Winner`).
        source: the short name of the winning candidate's kind (``greedy``, ``sample``,
            ``greedy on K devices``, ``clustering``, ``partition``, a memory baseline's name or
            ``adapter``).
        runner_up: the label of the best candidate that placed otherwise (None: none did).
        runner_up_cost: its simulated makespan.
        sim_calls: simulator calls the placer spent.
        greedy_cost: the policy's greedy rollout's makespan.
        rollout_cost: the best of the policy's rollouts.
        best_cost: the winner's makespan as the placer judged it.
        clustering_cost: the best clustering proposal's makespan (nan without one).
        partition_cost: the best partition proposal's makespan (nan without one).
        memory_cost: the best memory baseline's makespan (nan without one).
        checkpoint: the policy checkpoint of a learned placer.
        adapter: the per-instance table it placed with.
        samples: sampled rollouts judged.
        partitions: partition proposals judged.
        clusterings: clustering proposals judged.
        memory_baselines: memory baselines' placements judged.
        budget: simulator calls a search was given.
        search: the search's strategy.
        devices_used: the devices a rollout on fewer devices placed on.
        memory_fit: how the placement was made to fit the memory caps (``simulated``,
            ``repaired``, ``packed``, ``pipeline``).
        optimal: the exact placer proved its schedule optimal.
        bound: the exact placer's proven bound.
        gap: the gap between its schedule and its bound.
        status: the solver's status.
        schedule_makespan: the placer's own schedule's makespan.
        extra: every other key the placer gave (its own notes).
        keys: the keys given, in order (the typed fields not None when left empty).
    """

    produced_by: str | None = None
    source: str | None = None
    runner_up: str | None = None
    runner_up_cost: float | None = None
    sim_calls: int | None = None
    greedy_cost: float | None = None
    rollout_cost: float | None = None
    best_cost: float | None = None
    clustering_cost: float | None = None
    partition_cost: float | None = None
    memory_cost: float | None = None
    checkpoint: str | None = None
    adapter: str | None = None
    samples: int | None = None
    partitions: int | None = None
    clusterings: int | None = None
    memory_baselines: int | None = None
    budget: int | None = None
    search: str | None = None
    devices_used: int | None = None
    memory_fit: str | None = None
    optimal: bool | None = None
    bound: float | None = None
    gap: float | None = None
    status: str | None = None
    schedule_makespan: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    keys_given: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        extra = dict(self.extra)
        if not _META_FIELD_SET.isdisjoint(extra):
            name = next(k for k in extra if k in _META_FIELD_SET)
            raise PlacementError(
                f"placement meta: {name!r} in extra; expected it as the field {name}"
            )
        object.__setattr__(self, "extra", extra)
        keys = list(dict.fromkeys(self.keys_given))
        # typed fields set (e.g. by dataclasses.replace) and extra keys count as given
        have = set(keys)
        state = vars(self)
        keys += [k for k in META_FIELDS if state[k] is not None and k not in have]
        keys += [k for k in extra if k not in have]
        keys = [k for k in keys if k in extra or k in _META_FIELD_SET]
        object.__setattr__(self, "keys_given", tuple(keys))

    @classmethod
    def of(cls, meta: Mapping[str, Any] | None) -> PlacementMeta:
        """``meta`` as a record (a record as it is; a mapping, e.g. an old placement file's
        ``meta`` object, split into the typed fields and :attr:`extra`).

        Raises:
            PlacementError: ``meta`` is not a mapping.
        """
        if isinstance(meta, PlacementMeta):
            return meta
        if meta is None or (isinstance(meta, dict) and not meta):
            return EMPTY_META
        if not isinstance(meta, Mapping):
            raise PlacementError(
                f"placement meta is a {type(meta).__name__}; expected a mapping of names to values"
            )
        typed = {k: v for k, v in meta.items() if k in _META_FIELD_SET}
        extra = {k: v for k, v in meta.items() if k not in _META_FIELD_SET}
        return cls(**typed, extra=extra, keys_given=tuple(meta))

    def with_fields(self, **changes: Any) -> PlacementMeta:
        """A copy with ``changes`` set (new keys after the old ones, as a dict update)."""
        return PlacementMeta.of({**self, **changes})

    def to_dict(self) -> dict[str, Any]:
        """The keys given and their values, in order (a placement file's ``meta``)."""
        return {k: self[k] for k in self.keys_given}

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys_given:
            raise KeyError(key)
        return getattr(self, key) if key in _META_FIELD_SET else self.extra[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_given)

    def __len__(self) -> int:
        return len(self.keys_given)

    def __repr__(self) -> str:
        return f"PlacementMeta({self.to_dict()!r})"


#: the typed fields of :class:`PlacementMeta`
META_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(PlacementMeta) if f.name not in ("extra", "keys_given")
)
_META_FIELD_SET = frozenset(META_FIELDS)
#: the meta of a placement that says nothing (shared: a record never changes)
EMPTY_META = PlacementMeta()


def _empty_meta() -> PlacementMeta:
    return EMPTY_META


@dataclass(frozen=True, eq=False)
class Placement:
    """A device for every node of a graph.

    Attributes:
        device: ``(N,)`` device id per node. Entries of input nodes are not used by the simulator
            or executor (inputs are resident wherever they are consumed); placers set them to the
            device of the node's first consumer so that charts read naturally.
        priority: optional ``(N,)`` dispatch priority (smaller runs first among ready ops on a
            device) used by ``dispatch="priority"``; a placer's selection order, for instance.
        placer: name of the placer that made it.
        meta: what the placer says about it (:class:`PlacementMeta`; a mapping given is
            made one).
    """

    device: np.ndarray
    priority: np.ndarray | None = None
    placer: str = ""
    meta: PlacementMeta = field(default_factory=_empty_meta)

    def __post_init__(self) -> None:
        dev = np.array(self.device)
        if dev.ndim != 1:
            raise PlacementError(f"a placement is a 1-D array of device ids, got shape {dev.shape}")
        if dev.size and not np.issubdtype(dev.dtype, np.integer):
            if not np.all(np.isfinite(dev)) or not np.all(dev == np.round(dev)):
                bad = int(np.flatnonzero(~np.isfinite(dev) | (dev != np.round(dev)))[0])
                raise PlacementError(
                    f"node {bad} has device {show(dev[bad])}; expected an integer id"
                )
        dev = dev.astype(np.int64)
        dev.setflags(write=False)
        object.__setattr__(self, "device", dev)
        if self.priority is not None:
            pr = np.array(self.priority, dtype=np.float64).reshape(-1)
            if pr.shape != dev.shape:
                raise PlacementError(f"priority has {pr.size} entries for {dev.size} nodes")
            if not np.all(np.isfinite(pr)):
                raise PlacementError(
                    f"priority of node {int(np.flatnonzero(~np.isfinite(pr))[0])} is not finite"
                )
            pr.setflags(write=False)
            object.__setattr__(self, "priority", pr)
        object.__setattr__(self, "meta", PlacementMeta.of(self.meta))

    def __len__(self) -> int:
        return int(self.device.size)

    def validate(self, graph: DataflowGraph, num_devices: int) -> Placement:
        """Raise :class:`PlacementError` unless this placement fits ``graph`` on ``num_devices``."""
        if self.device.size != graph.num_nodes:
            raise PlacementError(
                f"placement has {self.device.size} entries but graph {graph.name!r} has "
                f"{graph.num_nodes} nodes"
            )
        comp = graph.compute_nodes
        d = self.device[comp]
        bad = np.flatnonzero((d < 0) | (d >= num_devices))
        if bad.size:
            v = int(comp[bad[0]])
            raise PlacementError(
                f"node {v} ({graph.names[v]!r}) is on device {int(self.device[v])}, "
                f"expected 0..{num_devices - 1}"
            )
        return self

    def with_inputs_filled(self, graph: DataflowGraph) -> Placement:
        """A copy whose input nodes sit on the device of their first consumer."""
        dev = self.device.copy()
        inputs = np.flatnonzero(graph.is_input)
        ptr = graph.succ_ptr
        has = ptr[inputs + 1] > ptr[inputs]
        first = graph.succ_idx[ptr[inputs[has]]]
        if graph.is_input[first].any():  # an input feeding an input: in node order, one by one
            for v in inputs:
                succ = graph.successors(int(v))
                dev[v] = dev[succ[0]] if succ.size else 0
        else:
            dev[inputs[has]] = dev[first]
            dev[inputs[~has]] = 0
        return Placement(dev, self.priority, self.placer, self.meta)

    def devices_used(self, graph: DataflowGraph) -> np.ndarray:
        return np.unique(self.device[graph.compute_nodes])

    def to_dict(
        self, graph: DataflowGraph | None = None, num_devices: int | None = None
    ) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": "doppler_lab.placement",
            "version": 1,
            "device": self.device.tolist(),
            "priority": None if self.priority is None else self.priority.tolist(),
            "placer": self.placer,
            "meta": to_jsonable(self.meta.to_dict()),
        }
        if graph is not None:
            d["graph"] = graph.name
            d["graph_digest"] = graph.structure_digest
            d["num_nodes"] = graph.num_nodes
        if num_devices is not None:
            d["num_devices"] = num_devices
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Placement:
        if "device" not in d:
            raise PlacementError("placement description lacks the field 'device'")
        return cls(np.array(d["device"]), d.get("priority"), d.get("placer", ""), d.get("meta", {}))


def round_robin(graph: DataflowGraph, num_devices: int) -> Placement:
    """Node i on device ``i mod D`` (the paper's round-robin baseline)."""
    return Placement(
        np.arange(graph.num_nodes) % num_devices, placer="round-robin"
    ).with_inputs_filled(graph)


def single_device(graph: DataflowGraph, num_devices: int = 1, device: int = 0) -> Placement:
    if not 0 <= device < num_devices:
        raise PlacementError(f"device {device} is not in 0..{num_devices - 1}")
    return Placement(np.full(graph.num_nodes, device), placer="single")


def random_placement(graph: DataflowGraph, num_devices: int, rng: np.random.Generator) -> Placement:
    return Placement(
        rng.integers(0, num_devices, graph.num_nodes), placer="random"
    ).with_inputs_filled(graph)

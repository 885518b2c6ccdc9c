"""``Placement.meta`` is a typed record (PlacementMeta): its fields, its round trip through a
placement file, and the dict metas of files written before it still loading."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from doppler_lab.house.errors import PlacementError
from doppler_lab.io.documents import load_placement, save_placement
from doppler_lab.ir.placement import META_FIELDS, Placement, PlacementMeta

#: a placement file's meta as the ``doppler`` placer wrote it before the record (the
#: clustering's own notes first, then the placer's fields)
OLD_META = {
    "clusters": 13, "model_runs": 313, "passes": 1, "model_length": 1668658008064.0,
    "cap": None, "checkpoint": "data/checkpoints/doppler/general.pt", "greedy_cost": 166.87,
    "rollout_cost": 166.87, "partition_cost": 228.77, "clustering_cost": 166.87,
    "memory_cost": None, "best_cost": 166.87, "source": "clustering", "samples": 16,
    "partitions": 4, "clusterings": 1, "memory_baselines": 0, "sim_calls": 22,
}  # fmt: skip


def test_a_dict_meta_becomes_the_record_and_reads_as_before():
    p = Placement([0, 1, 1], None, "doppler", OLD_META)
    meta = p.meta
    assert isinstance(meta, PlacementMeta)
    assert (meta.source, meta.sim_calls, meta.best_cost) == ("clustering", 22, 166.87)
    assert meta.extra == {k: OLD_META[k] for k in ("clusters", "model_runs", "passes",
                                                   "model_length", "cap")}  # fmt: skip
    # the mapping it replaces: the keys given, in order; absent ones absent (not None)
    assert list(meta) == list(OLD_META) and meta == OLD_META and dict(meta) == OLD_META
    assert meta["memory_cost"] is None and "memory_cost" in meta
    assert "produced_by" not in meta and meta.get("produced_by", "-") == "-"
    with pytest.raises(KeyError):
        meta["produced_by"]
    assert {**meta, "sim_calls": 3}["sim_calls"] == 3


def test_the_record_round_trips_through_a_placement_file(tmp_path):
    meta = PlacementMeta.of(OLD_META).with_fields(
        produced_by="proposal clustering", runner_up="sample 3", runner_up_cost=math.inf
    )
    assert meta.produced_by == "proposal clustering" and list(meta)[-3:] == [
        "produced_by", "runner_up", "runner_up_cost",
    ]  # fmt: skip
    p = Placement([0, 1, 1], None, "doppler", meta)
    path = save_placement(p, tmp_path / "p.json")
    doc = json.loads(path.read_text())
    # written as the dict was, the added fields after the old ones (inf as null)
    assert list(doc["meta"]) == [*OLD_META, "produced_by", "runner_up", "runner_up_cost"]
    back = load_placement(path).meta
    assert back.produced_by == "proposal clustering" and back.runner_up == "sample 3"
    assert back.runner_up_cost is None and back.extra["clusters"] == 13
    assert back.to_dict() == doc["meta"]


def test_an_old_placement_file_with_a_dict_meta_loads(tmp_path):
    doc = {"format": "doppler_lab.placement", "version": 1, "device": [0, 1, 1],
           "priority": None, "placer": "doppler", "meta": OLD_META}  # fmt: skip
    (tmp_path / "old.json").write_text(json.dumps(doc))
    p = load_placement(tmp_path / "old.json")
    assert p.meta.source == "clustering" and p.meta.produced_by is None
    assert p.to_dict()["meta"] == OLD_META


def test_set_fields_count_as_given_and_bad_metas_are_refused():
    meta = PlacementMeta(sim_calls=3, extra={"note": "x"})
    assert meta.to_dict() == {"sim_calls": 3, "note": "x"}
    assert replace(meta, produced_by="sample 1")["produced_by"] == "sample 1"
    assert "produced_by" in META_FIELDS and "extra" not in META_FIELDS
    with pytest.raises(PlacementError, match="placement meta is a list; expected a mapping"):
        Placement([0], meta=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(PlacementError, match="'sim_calls' in extra"):
        PlacementMeta(extra={"sim_calls": 1})

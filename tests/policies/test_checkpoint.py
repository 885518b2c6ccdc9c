"""Checkpoints: round trip, clear errors for another kind / layout / device count, shipped
checkpoint lookup, learned placers in the registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import CheckpointError, ConfigError
from doppler_lab.placers import available_placers, place
from doppler_lab.policies.checkpoint import load_policy, make_policy, save_checkpoint
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.policies.pretrained import list_checkpoints, resolve_checkpoint

SMALL = dict(hidden=16, head_hidden=16, mp_steps=2, num_bases=4)


def _save(tmp_path, kind="dual", devices=4, name="p.pt", **kw):
    pol = make_policy(PolicyConfig(kind=kind, **SMALL, **kw), devices, seed=3)
    return pol, save_checkpoint(tmp_path / name, pol, {"note": "test"})


def test_round_trip(tmp_path):
    pol, path = _save(tmp_path)
    back, doc = load_policy(path, ["dual"], 4)
    assert back.config == pol.config and doc["meta"]["note"] == "test"
    for k, v in pol.state_dict().items():
        torch.testing.assert_close(back.state_dict()[k], v)


def test_same_seed_same_weights():
    a = make_policy(PolicyConfig(**SMALL), 4, seed=1)
    b = make_policy(PolicyConfig(**SMALL), 4, seed=1)
    state = torch.random.get_rng_state()
    c = make_policy(PolicyConfig(**SMALL), 4, seed=2)
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched
    for k, v in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[k], v)
    assert any(not torch.equal(c.state_dict()[k], v) for k, v in a.state_dict().items())


def test_wrong_kind(tmp_path):
    _, path = _save(tmp_path, kind="gdp")
    with pytest.raises(CheckpointError, match="holds a 'gdp' policy, expected 'placeto'"):
        load_policy(path, ["placeto"])


def test_wrong_device_count(tmp_path):
    _, path = _save(tmp_path, kind="placeto")
    with pytest.raises(CheckpointError, match="trained for 4 devices, but the cluster has 8"):
        load_policy(path, num_devices=8)
    pol, _ = load_policy(path, num_devices=8, allow_device_change=True)
    assert pol.num_devices == 8


@pytest.mark.parametrize("kind", ["dual", "sel-only", "plc-only"])
def test_doppler_policies_run_on_any_device_count_unchanged(tmp_path, kind):
    """Shared per-device weights: no flag, and every weight loads as saved."""
    saved, path = _save(tmp_path, kind=kind)
    for d in (2, 8):
        pol, doc = load_policy(path, num_devices=d)
        assert pol.num_devices == d and "reinitialised" not in doc["meta"]
        for k, v in saved.state_dict().items():
            torch.testing.assert_close(pol.state_dict()[k], v)


def test_device_change_reinitialises_device_sized_layers(tmp_path):
    _, path = _save(tmp_path, kind="gdp")
    pol, doc = load_policy(path, num_devices=2, allow_device_change=True)
    assert pol.out.out_features == 2
    assert "out.weight" in doc["meta"]["reinitialised"]


def test_wrong_feature_layout(tmp_path):
    _, path = _save(tmp_path)
    doc = torch.load(path, weights_only=True)
    doc["policy"]["layout"]["device"] = doc["policy"]["layout"]["device"][:-1]
    torch.save(doc, tmp_path / "edited.pt")
    with pytest.raises(CheckpointError, match="device features"):
        load_policy(tmp_path / "edited.pt")
    doc["policy"]["layout"]["name"] = "doppler7"
    torch.save(doc, tmp_path / "edited.pt")
    with pytest.raises(CheckpointError, match="'doppler7'"):
        load_policy(tmp_path / "edited.pt")


def test_foreign_files(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a doppler_lab policy checkpoint"):
        load_policy(tmp_path / "other.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_policy(tmp_path / "text.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_policy(tmp_path / "missing.pt")


def test_shipped_lookup(tmp_path, monkeypatch):
    _, path = _save(tmp_path / "ship" / "doppler", name="tiny.pt")
    (tmp_path / "ship" / "index.json").write_text(
        '{"checkpoints": {"doppler/tiny": {"episodes": 3}}}'
    )
    monkeypatch.setenv("DOPPLER_LAB_CHECKPOINTS", str(tmp_path / "ship"))
    found = list_checkpoints()
    assert found["doppler/tiny"]["episodes"] == 3
    assert resolve_checkpoint("doppler/tiny") == path
    assert resolve_checkpoint("tiny", "doppler") == path  # a bare name within the placer family
    with pytest.raises(CheckpointError, match="'tiny' is neither"):
        resolve_checkpoint("tiny", "gdp")
    with pytest.raises(CheckpointError, match="neither a file nor a shipped checkpoint"):
        resolve_checkpoint("doppler/nope")


def test_learned_placers(tmp_path, small_graph, cluster4):
    assert {"doppler", "placeto", "gdp"} <= set(available_placers())
    _, path = _save(tmp_path)
    p = place(
        "doppler", small_graph, cluster4, seed=0, checkpoint=str(path), samples=3, semantics="wc"
    )
    assert p.placer == "doppler"
    assert p.meta["best_cost"] <= p.meta["greedy_cost"]
    a = place(
        "doppler", small_graph, cluster4, seed=5, checkpoint=str(path), samples=3, semantics="wc"
    )
    b = place(
        "doppler", small_graph, cluster4, seed=5, checkpoint=str(path), samples=3, semantics="wc"
    )
    np.testing.assert_array_equal(a.device, b.device)
    with pytest.raises(ConfigError, match="needs a checkpoint"):
        place("gdp", small_graph, cluster4)
    with pytest.raises(CheckpointError, match="expected 'gdp'"):
        place("gdp", small_graph, cluster4, checkpoint=str(path))
    two = place("doppler", small_graph, make_cluster("uniform", 2), checkpoint=str(path), samples=2)
    assert set(np.unique(two.device)) <= {0, 1}
    _, gdp = _save(tmp_path, kind="gdp", name="g.pt")
    with pytest.raises(CheckpointError, match="trained for 4 devices"):
        place("gdp", small_graph, make_cluster("uniform", 2), checkpoint=str(gdp))


def test_checkpoint_without_placed_norm_reads_as_the_zscore_it_was_trained_with(tmp_path):
    pol, path = _save(tmp_path, placed_norm="zscore")
    doc = torch.load(path, weights_only=False)
    del doc["policy"]["config"]["placed_norm"]  # written before the option existed
    torch.save(doc, tmp_path / "old.pt")
    back, _ = load_policy(tmp_path / "old.pt", ["dual"], 4)
    assert back.config.placed_norm == "zscore" and back.plc.placed_norm == "zscore"
    assert PolicyConfig().placed_norm == "smooth"
    with pytest.raises(
        ConfigError, match="setting placed_norm='std'; expected one of smooth, zscore"
    ):
        PolicyConfig(placed_norm="std")


def test_widened_policy_places_as_the_saved_one(tmp_path, small_graph, cluster4):
    """A zero-weighted new device feature changes no decision; a layout that does not extend the
    saved one is refused by name."""
    from doppler_lab.policies.checkpoint import widen_checkpoint

    cfg = PolicyConfig(hidden=16, head_hidden=16, mp_steps=2, num_bases=4, estimate="wc")
    path = save_checkpoint(tmp_path / "p9.pt", make_policy(cfg, 4, seed=4))
    wide = widen_checkpoint(path, "doppler10", tmp_path / "p10.pt")
    got = []
    for ckpt in (path, wide):
        opts = dict(checkpoint=str(ckpt), samples=4, clustering=False, partitions=0)
        got.append(place("doppler", small_graph, cluster4, seed=0, semantics="wc", **opts).device)
    np.testing.assert_array_equal(got[0], got[1])
    with pytest.raises(CheckpointError, match="does not extend"):
        widen_checkpoint(path, "doppler5", tmp_path / "p5.pt")
    with pytest.raises(CheckpointError, match="must map a new device feature"):
        widen_checkpoint(path, "doppler10", tmp_path / "px.pt", {"cluster_share": "nope"})


def test_sample_temperature_from_the_checkpoint_or_the_placer(tmp_path, small_graph, cluster4):
    """A checkpoint's ``sample_temperature`` sets PLC's temperature in the sampled rollouts;
    1 (or none) is the plain softmax to the bit; the placer option overrides the checkpoint's;
    the greedy rollout is the same at any temperature; bad values are refused by name."""
    from doppler_lab.policies.checkpoint import set_sample_temperature
    from doppler_lab.search.budget import policy_candidates

    _, plain = _save(tmp_path)
    assert load_policy(plain)[0].sample_temperature == 1.0

    def samples(ckpt, **opts):
        from doppler_lab.placers import get_placer

        placer = get_placer("doppler", checkpoint=str(ckpt), semantics="wc", **opts)
        pol = placer.policy(cluster4.num_devices)
        cands = policy_candidates(pol, small_graph, cluster4, 8, np.random.default_rng(3))
        return np.stack([c.device for c in cands])

    base = samples(plain)
    one = set_sample_temperature(tmp_path / "p.pt", 1.0)
    np.testing.assert_array_equal(samples(one), base)
    cold = set_sample_temperature(tmp_path / "p.pt", 0.05)
    assert load_policy(cold)[0].sample_temperature == 0.05
    got = samples(cold)
    np.testing.assert_array_equal(got[0], base[0])  # the greedy rollout
    assert (got[1:] != base[1:]).any()
    np.testing.assert_array_equal(samples(cold, temperature=1), base)  # the option wins
    set_sample_temperature(cold, None)
    _, doc = load_policy(cold)
    assert "sample_temperature" not in doc["meta"]
    np.testing.assert_array_equal(samples(cold, temperature=0.05), got)

    doc = torch.load(plain, weights_only=False)
    doc["meta"]["sample_temperature"] = -2
    torch.save(doc, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="meta sample_temperature is -2; expected"):
        load_policy(tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="sample temperature for"):
        set_sample_temperature(plain, float("nan"))
    with pytest.raises(ConfigError, match="option temperature=0; expected a finite number > 0"):
        place("doppler", small_graph, cluster4, checkpoint=str(plain), temperature=0)

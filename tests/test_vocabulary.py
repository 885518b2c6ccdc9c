"""One vocabulary: ``semantics`` is what the simulator runs, ``estimate`` the episode state's
running guess; the names before 0.2 (``timing``, the value ``paper``) are still read."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.hardware import make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.placers import place
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.timing.schedule import ESTIMATES, LEGACY_ESTIMATES, estimate_for
from doppler_lab.workloads import build


def test_no_estimate_is_named_like_a_semantics_it_does_not_mean() -> None:
    from doppler_lab.timing.sim import SEMANTICS

    # a name both lists use must mean the same run: only wc, whose estimate models wc's links
    assert set(ESTIMATES) & set(SEMANTICS) == {"wc"}
    assert estimate_for("wc") == "wc" and estimate_for("paper") == "est"


def test_old_option_and_value_give_the_same_placement() -> None:
    g, c = build("chainmm", scale=0.25), make_cluster("p100x4")
    new = place("cp", g, c, seed=3, estimate="additive")
    old = place("cp", g, c, seed=3, timing="paper")
    assert np.array_equal(new.device, old.device) and new.meta["estimate"] == "additive"
    assert LEGACY_ESTIMATES == {"paper": "additive"}


def test_stored_policy_configs_with_timing_still_load() -> None:
    assert PolicyConfig.from_dict({"timing": "paper"}).estimate == "additive"
    assert PolicyConfig.from_dict({"timing": "wc"}).estimate == "wc"
    assert PolicyConfig(estimate="paper").estimate == "additive"


def test_an_unknown_estimate_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="est, additive, wc"):
        PolicyConfig(estimate="fast")

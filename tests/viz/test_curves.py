"""Learning curves and quality bar charts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from doppler_lab.house.errors import ConfigError, FormatError
from doppler_lab.viz import bar_compare, learning_curves, read_metrics, smooth


def run_frame(seed: int, method: str = "dual", episodes: int = 50) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ep = np.arange(episodes)
    return pd.DataFrame(
        {
            "episode": ep,
            "stage2/makespan": 2.0 + np.exp(-ep / 10) + rng.normal(0, 0.05, episodes),
            "stage2/loss": rng.normal(0, 1, episodes),
            "method": method,
        }
    )


def lines(fig, name: str):
    return [t for t in fig.data if t.name == name and t.mode == "lines" and t.hovertemplate]


def test_smooth_is_a_debiased_moving_average() -> None:
    x = np.array([1.0, 3.0, np.nan, 5.0])
    assert np.array_equal(smooth(x, 0.0), x, equal_nan=True)
    s = smooth(x, 0.5)
    assert s[0] == 1.0  # bias-corrected: the first value is kept
    assert s[1] == pytest.approx((0.25 * 1 + 0.5 * 3) / 0.75)
    assert s[2] == s[1]  # a NaN keeps the previous average
    assert np.allclose(smooth(np.full(20, 4.0), 0.9), 4.0)
    with pytest.raises(ConfigError, match="smoothing weight 1.0"):
        smooth(x, 1.0)


def test_one_panel_per_metric_from_csv_and_jsonl(tmp_path) -> None:
    csv = tmp_path / "seed0.csv"
    run_frame(0).to_csv(csv, index=False)
    jsonl = tmp_path / "seed1.jsonl"
    run_frame(1).to_json(jsonl, orient="records", lines=True)
    assert len(read_metrics(jsonl)) == 50
    fig = learning_curves([csv, jsonl], metrics=["stage2/makespan", "stage2/loss"], smoothing=0.0)
    assert [a.text for a in fig.layout.annotations] == ["stage2/makespan", "stage2/loss"]
    mean = lines(fig, "all runs")
    assert len(mean) == 2
    expected = (run_frame(0)["stage2/makespan"] + run_frame(1)["stage2/makespan"]) / 2
    assert np.allclose(mean[0].y, expected)
    band = [t for t in fig.data if t.fill == "toself"]
    assert len(band) == 2  # one spread band per panel
    with pytest.raises(FormatError, match="does not exist"):
        read_metrics(tmp_path / "missing.csv")


def test_groups_are_separate_series_with_bands() -> None:
    runs = {f"{m}-{s}": run_frame(s, m) for m in ("dual", "sel-only") for s in range(3)}
    fig = learning_curves(runs, metrics=["stage2/makespan"], group="method", band="minmax")
    assert [t.name for t in fig.data if t.hovertemplate] == ["dual", "sel-only"]
    assert "mean of 3 runs" in lines(fig, "dual")[0].hovertemplate
    band = next(t for t in fig.data if t.fill == "toself" and t.name == "dual")
    assert band.fillcolor.startswith("rgba(")
    single = learning_curves(run_frame(0), metrics=["stage2/makespan"], smoothing=0.9)
    assert len(single.data) == 1  # one run: no band
    default = learning_curves(run_frame(0))
    assert len(default.layout.annotations) == 2  # every numeric column but the step


def test_missing_columns_are_named() -> None:
    with pytest.raises(ConfigError, match="no column 'stage3/makespan'"):
        learning_curves(run_frame(0), metrics=["stage3/makespan"])
    with pytest.raises(ConfigError, match="band 'iqr'"):
        learning_curves(run_frame(0), band="iqr")  # type: ignore[arg-type]


def test_bar_compare_averages_seeds() -> None:
    rows = [
        {"graph": g, "method": m, "ratio": r + 0.1 * s}
        for g in ("chainmm", "ffnn")
        for m, r in (("dual", 1.2), ("cp", 1.6))
        for s in range(3)
    ]
    fig = bar_compare(rows, title="makespan / lower bound")
    bars = [t for t in fig.data if t.type == "bar"]
    assert [b.name for b in bars] == ["dual", "cp"]
    assert list(bars[0].x) == ["chainmm", "ffnn"]
    assert list(bars[0].y) == pytest.approx([1.3, 1.3])
    assert list(bars[0].error_y.array) == pytest.approx([0.1, 0.1])
    assert fig.layout.shapes[0].y0 == 1.0  # the lower-bound line
    with pytest.raises(ConfigError, match="no column 'makespan'"):
        bar_compare(rows, value="makespan")


def test_bar_compare_uses_a_given_error_column() -> None:
    frame = pd.DataFrame(
        {"graph": ["a", "a"], "method": ["x", "y"], "ratio": [1.1, 1.4], "sd": [0.02, 0.3]}
    )
    fig = bar_compare(frame, error="sd", reference=None)
    assert [list(b.error_y.array) for b in fig.data] == [[0.02], [0.3]]
    assert not fig.layout.shapes


def test_axes_read_in_the_tables_units():
    """A chart of makespans in seconds draws them as the tables do (ms here), names the unit,
    and uses a log axis where the values span decades; a graph in cost units is not scaled."""
    import pandas as pd

    from doppler_lab.viz.curves import bar_compare, learning_curves

    frame = pd.DataFrame(
        {"episode": [0, 1, 2, 0, 1, 2], "run": [0, 0, 0, 1, 1, 1],
         "greedy_cost": [0.004, 0.003, 0.002, 0.004, 0.003, 0.002],
         "loss": [100.0, 1.0, 0.01, 90.0, 2.0, 0.02]}
    )  # fmt: skip
    frame.attrs["units"] = {"greedy_cost": "s"}
    fig = learning_curves(frame, metrics=["greedy_cost", "loss"], smoothing=0.0)
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["greedy_cost (ms)", "loss"]
    drawn = [
        v for t in fig.data if t.yaxis == "y" and t.y is not None for v in t.y if v is not None
    ]
    assert max(drawn) == 4.0
    assert fig.layout.yaxis.type == "linear" and fig.layout.yaxis2.type == "log"
    cost = learning_curves(
        frame, metrics=["greedy_cost"], smoothing=0.0, units={"greedy_cost": "cost units"}
    )
    assert [a.text for a in cost.layout.annotations] == ["greedy_cost (cost units)"]
    bars = bar_compare(
        pd.DataFrame({"variant": ["a", "b"], "judge": ["x", "x"], "seconds": [0.02, 0.03]}),
        value="seconds", category="variant", series="judge", reference=None,
    )  # fmt: skip
    assert bars.layout.yaxis.title.text == "time (ms)" and list(bars.data[0].y) == [20.0, 30.0]

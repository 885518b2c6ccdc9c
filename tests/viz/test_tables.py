"""Tables for people: units in headers, significant figures, integers, empty cells, no
truncation (doppler_lab.viz.tables)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from doppler_lab.viz.html import format_cell, markdown_table
from doppler_lab.viz.tables import format_number, format_value, infer_unit, tidy


def test_time_units_are_chosen_per_column():
    t = tidy(
        pd.DataFrame(
            {
                "makespan": [4.877223e-05, 6.1e-05],  # seconds, given
                "train_s": [12.5, 30.25],  # named *_s
                "measured_s": [0.0123, 0.0456],
                "inference_ms": [0.5, 0.7],  # below 1 ms: shown in us
                "inference_us_per_node": [3.25, 4.5],
            }
        ),
        units={"makespan": "s"},
    )
    assert list(t.frame.columns) == [
        "makespan (us)",
        "train (s)",
        "measured (ms)",
        "inference (us)",
        "inference (us/node)",
    ]
    assert t.frame["makespan (us)"].tolist() == ["48.77", "61"]
    assert t.frame["measured (ms)"].tolist() == ["12.3", "45.6"]
    assert t.frame["inference (us)"].tolist() == ["500", "700"]
    assert t.units["makespan"] == "us" and t.units["train_s"] == "s"


def test_significant_figures_integers_and_missing_values():
    t = tidy(
        [
            {"graph": "a", "nodes": 24.0, "ratio": 1.23456789, "big": 123456.7, "x": None},
            {"graph": "b", "nodes": np.nan, "ratio": 0.000012345, "big": 2.5, "x": np.nan},
            {"graph": None, "nodes": 1200, "ratio": 10.0, "big": pd.NA, "x": float("nan")},
        ]
    )
    f = t.frame
    assert f["nodes"].tolist() == ["24", "", "1,200"]  # a float column of counts: integers
    assert f["ratio"].tolist() == ["1.235", "0.00001234", "10"]  # 4 significant, never 1.2e-05
    assert f["big"].tolist() == ["123,457", "2.5", ""]
    assert f["x"].tolist() == ["", "", ""] and f["graph"].tolist() == ["a", "b", ""]
    text = repr(t)
    assert "nan" not in text.lower() and "None" not in text and "e+" not in text
    assert [format_number(v) for v in (1.23456, 0.5, 2.0, 99999.4, 0.30004)] == [
        "1.235",
        "0.5",  # a short value is not padded
        "2",
        "99,999",
        "0.3000",  # measured (not short): four significant figures
    ]


def test_percent_and_named_units():
    assert infer_unit("vs_cp") == "%" and infer_unit("measured_vs_cp") == "%"
    assert infer_unit("makespan") is None and infer_unit("cp_rollout_s") == "s"
    assert len(tidy({})) == 0 and repr(tidy([])) == "(no rows)"
    t = tidy(
        pd.DataFrame({"vs_cp": [0.1234, -0.05], "flops": [2.5, 1.0], "vs_heft": [0.1, 0.2]}),
        units={"flops": "GFLOP", "vs_heft": None},
    )
    assert list(t.frame.columns) == ["vs_cp (%)", "flops (GFLOP)", "vs_heft"]
    assert t.frame["vs_cp (%)"].tolist() == ["12.34", "-5"]
    assert format_value(0.0123, "s") == "12.3 ms" and format_value(2.5, "s") == "2.5 s"
    assert format_value(0.25, "%") == "25 %" and format_value(np.int64(3), "nodes") == "3 nodes"
    assert format_value(None) == "" and format_value(float("nan"), "s") == ""
    assert format_value(True) == "yes" and format_value(24.0) == "24"


def test_mappings_are_quantity_value_tables_formatted_per_cell():
    t = tidy({"nodes": 24.0, "makespan_s": 0.0125, "workload": "llama_block", "ok": False})
    assert t.frame.to_dict(orient="records") == [
        {"quantity": "nodes", "value": "24"},
        {"quantity": "makespan", "value": "12.5 ms"},
        {"quantity": "workload", "value": "llama_block"},
        {"quantity": "ok", "value": "no"},
    ]


def test_wide_and_long_tables_are_not_truncated():
    wide = pd.DataFrame(
        [{"graph": f"g{i}", **{f"c{j}": i * j + 0.5 for j in range(28)}} for i in range(3)]
    )
    t = tidy(wide)
    assert len(t.shown) == 10 and len(t.hidden) == 19 and t.keys == ["graph"]
    page = t.to_html()
    assert "<details><summary>19 more columns: c9, c10" in page
    assert "..." not in page and page.count("<tr>") == 2 * (1 + 3)  # all rows, twice
    assert "c27" in repr(t)  # the text form holds every column
    chosen = tidy(wide, show=["graph", "c5"])
    assert chosen.shown == ["graph", "c5"] and "c0" in chosen.hidden
    long = tidy(pd.DataFrame({"i": range(100)}), max_rows=20)
    assert "<summary>80 more rows</summary>" in long.to_html() and "99" in long.to_html()
    with pytest.raises(KeyError, match="no column 'nope'"):
        tidy(wide, show=["nope"])


def test_bench_markdown_tables_use_the_same_formatter():
    md = markdown_table(
        [{"graph": "a", "makespan": 1.5, "train_s": 0.0042, "n": 3.0}, {"graph": "b"}],
        ["graph", "makespan", "train_s", "n", "absent"],
    )
    lines = md.splitlines()
    assert lines[0] == "| graph | makespan | train (ms) | n | absent |"
    assert lines[2] == "| a | 1.5 | 4.2 | 3 |  |"
    assert lines[3] == "| b |  |  |  |  |"
    assert markdown_table([]) == "(no rows)\n"
    assert format_cell(float("nan")) == "" and format_cell(4.877223e-05) == "0.00004877"


def test_no_scientific_notation_at_any_magnitude():
    """Tiny and huge numbers read in fixed notation (issue: 2.78e-17 and 7.7e-05 in tables)."""
    from doppler_lab.viz.tables import MAX_DECIMALS

    for v in (2.78e-17, -2.22e-16, 7.7e-05, 3e-7, 1.5e15, 4.2e21, -9.9e-11):
        text = format_number(v)
        assert "e" not in text.lower(), (v, text)
    assert format_number(2.78e-17) == "0" and format_number(-2.22e-16) == "0"
    assert format_number(1.5e15) == "1,500,000,000,000,000"
    assert len(format_number(1.234e-9).split(".")[1]) <= MAX_DECIMALS
    assert format_value(4.2e-9, "s") == "4.2 ns" and format_value(-3e-17, "%") == "0 %"


def test_cost_units_are_named_not_scaled_as_times():
    """A makespan in the paper's cost units is never shown as ms (1,900,084 ms for 1,900 units)."""
    from doppler_lab.viz.tables import COST_UNITS, tidy_by_unit

    assert format_value(1900.084, COST_UNITS) == "1,900 cost units"
    rows = [
        {"task": "a", "cp": 0.0021, "vs_cp": 0.1, "unit": "s"},
        {"task": "paper", "cp": 1900.084, "vs_cp": 0.2, "unit": COST_UNITS},
        {"task": "b", "cp": 0.0030, "vs_cp": 0.1, "unit": "s"},
        {"task": "mean", "cp": None, "vs_cp": 0.15, "unit": None},
    ]
    tables = list(tidy_by_unit(rows, ["cp"]))
    heads = [list(t.frame.columns) for t in tables]
    assert heads == [["task", "cp (ms)", "vs_cp (%)"], ["task", "cp (cost units)", "vs_cp (%)"],
                     ["task", "cp", "vs_cp (%)"]]  # fmt: skip
    assert tables[0].frame["cp (ms)"].tolist() == ["2.1", "3"]
    assert tables[1].frame["cp (cost units)"].tolist() == ["1,900"]
    assert "seconds" in tables[0].caption and "cost units" in tables[1].caption
    with pytest.raises(KeyError, match="no column 'unit'"):
        tidy_by_unit([{"cp": 1.0}], ["cp"])


def test_a_quantity_shown_in_ms_is_not_named_in_seconds():
    """A quantity / value table shows ``best_baseline`` = ``12.3 ms``, not ``best_baseline_s``."""
    t = tidy({"best_baseline_s": 0.0123, "cases": 4, "train_s_per_step": 0.5})
    assert t.frame["quantity"].tolist() == ["best_baseline", "cases", "train_s_per_step"]
    assert t.frame["value"].tolist()[0] == "12.3 ms"


def test_a_column_name_is_never_repeated_once_its_unit_is_dropped():
    """``greedy`` (a makespan) and ``greedy_ms`` (the wall time of placing it) both in ms."""
    t = tidy([{"greedy": 0.0123, "greedy_ms": 4.5, "cp_rollout": 0.02, "cp_rollout_s": 0.5}],
             units={"greedy": "s", "cp_rollout": "s"})  # fmt: skip
    assert list(t.frame.columns) == [
        "greedy (ms)", "greedy time (ms)", "cp_rollout (ms)", "cp_rollout time (ms)"
    ]  # fmt: skip

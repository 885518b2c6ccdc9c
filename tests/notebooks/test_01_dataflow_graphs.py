from __future__ import annotations


def test_dataflow_graphs(run_notebook):
    s = run_notebook("01_dataflow_graphs.ipynb", scale=0.05, draw="chainmm")
    names = {g["graph"] for g in s["graphs"]}
    assert {"chainmm", "ffnn", "llama_block", "llama_layer", "moe_layer"} <= names
    for g in s["graphs"]:
        assert g["critical_path"] <= g["work"] + 1e-12 and g["lower_bound"] > 0
    assert s["num_generated"] == 5


def test_dataflow_graphs_without_paper_files(run_notebook, tmp_path):
    s = run_notebook("01_dataflow_graphs.ipynb", scale=0.05, paper_graphs=str(tmp_path / "nowhere"))
    assert s["num_paper"] == 0 and s["num_generated"] == 5

"""The placement explorer: pure functions, the Critical Path stepper, and the widgets."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError, PlacementError
from doppler_lab.placers import available_placers, place, placer_specs
from doppler_lab.viz.widgets import (
    CriticalPathStepper,
    EpisodeStepper,
    PlacerChoice,
    Scenario,
    build_graph,
    checkpoint_choices,
    compare,
    make_stepper,
    run_episode,
    step_figure,
    step_table,
    steppable_placers,
    workload_choices,
)
from doppler_lab.workloads import build

TINY = Scenario("chainmm", scale="tiny", cluster="p100x4", semantics="wc")


@pytest.fixture(scope="module")
def graph():
    return build("llama_block", scale="tiny")


@pytest.fixture(scope="module")
def small():
    """A smaller graph for the learned policies (Placeto re-embeds at every step)."""
    return build("random_dag", num_nodes=30, width=6, seed=1)


@pytest.fixture(scope="module")
def cluster():
    return make_cluster("p100x4")


def test_nothing_imports_ipywidgets_at_module_load():
    code = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import doppler_lab
        failed = []
        for mod in pkgutil.walk_packages(doppler_lab.__path__, "doppler_lab."):
            try:
                importlib.import_module(mod.name)
            except Exception as exc:  # another module's own problem, not this test's
                failed.append(f"{mod.name}: {exc!r}")
        print("\\n".join(failed), file=sys.stderr)
        assert "doppler_lab.viz.widgets" in sys.modules
        assert "ipywidgets" not in sys.modules, "ipywidgets imported at module load"
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_compare_two_placers():
    cmp = compare(TINY, "round-robin", "cp")
    m = cmp.metrics
    assert list(m.index) == ["round-robin", "cp"]
    assert {"makespan", "ratio_lb", "transfers", "utilisation"} <= set(m.columns)
    assert (m["ratio_lb"] >= 1 - 1e-9).all()
    assert np.allclose(m["makespan"], [t.makespan for t in cmp.traces.values()])  # no noise
    assert (m["makespan_std"] == 0).all()
    assert ((m["utilisation"] > 0) & (m["utilisation"] <= 1)).all()
    assert m.loc["cp", "transfers"] == cmp.traces["cp"].num_transfers
    assert cmp.improvement == pytest.approx(1 - m["makespan"].iloc[1] / m["makespan"].iloc[0])
    assert (cmp.placements["cp"].device == place("cp", cmp.graph, cmp.cluster, 0).device).all()
    assert len(cmp.figure.layout.annotations) >= 2  # one subplot title per placer


def test_compare_noise_and_labels():
    sc = Scenario("chainmm", scale="tiny", noise=0.2, noise_seeds=3, seed=4)
    cmp = compare(sc, PlacerChoice("cp"), PlacerChoice("cp", options={"estimate": "additive"}))
    assert list(cmp.metrics.index) == ["cp", "cp [estimate=additive]"]
    assert (cmp.metrics["makespan_std"] > 0).all()
    same = compare(TINY, "cp", "cp")
    assert list(same.metrics.index) == ["A: cp", "B: cp"]
    assert same.improvement == 0


def test_scenario_and_choices_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="semantics"):
        Scenario(semantics="async")
    with pytest.raises(ConfigError, match="noise"):
        Scenario(noise=-1.0)
    with pytest.raises(ConfigError, match="paper graph 'nope'"):
        build_graph("paper:nope", paper_graphs=str(tmp_path))
    with pytest.raises(ConfigError, match="unknown workload"):
        compare(Scenario("nowhere"), "cp", "cp")
    assert workload_choices(str(tmp_path))[:2] == ["chainmm", "ffnn"]


def test_learned_placer_needs_a_checkpoint():
    learned = [n for n, s in placer_specs().items() if s.needs_checkpoint]
    if not learned:
        pytest.skip("no learned placer registered")
    with pytest.raises(ConfigError, match="needs a checkpoint"):
        PlacerChoice(learned[0]).placer_options()


def test_checkpoint_choices(tmp_path):
    (tmp_path / "doppler").mkdir()
    (tmp_path / "doppler" / "ffnn.pt").write_bytes(b"")
    (tmp_path / "doppler" / "llama").mkdir()
    (tmp_path / "doppler" / "notes.txt").write_text("")
    (tmp_path / "shared.pt").write_bytes(b"")
    found = checkpoint_choices("doppler", tmp_path)
    assert [p.rsplit("/", 1)[1] for p in found] == ["ffnn.pt", "llama", "shared.pt"]
    assert [p.rsplit("/", 1)[1] for p in checkpoint_choices("gdp", tmp_path)] == ["shared.pt"]
    assert PlacerChoice("doppler", found[0]).label == "doppler [ffnn]"


def _check_step(s, graph, before, greedy=False):
    """A step's candidates are exactly the ready unassigned compute nodes of ``before``; the
    chosen node and device are among the most likely (the best scored, for greedy steps)."""
    comp = graph.compute_nodes
    ready = [
        v
        for v in comp
        if before[v] < 0 and all(graph.is_input[u] or before[u] >= 0 for u in graph.predecessors(v))
    ]
    assert s.candidates.tolist() == ready
    assert s.chosen_node in s.candidates
    k = int(np.flatnonzero(s.candidates == s.chosen_node)[0])
    assert s.sel_scores[k] == pytest.approx(s.sel_scores.max())
    for p in (s.sel_probs, s.plc_probs):
        assert (p >= 0).all() and p.sum() == pytest.approx(1.0)
    assert s.sel_probs[k] == pytest.approx(s.sel_probs.max())
    assert s.plc_probs[s.chosen_device] == pytest.approx(s.plc_probs.max())
    if greedy:
        assert s.plc_scores[s.chosen_device] == pytest.approx(s.plc_scores.max())
    assert s.device[s.chosen_node] == s.chosen_device
    assert (s.device >= 0).sum() == (before >= 0).sum() + 1


@pytest.mark.parametrize("estimate", ["est", "additive"])
@pytest.mark.parametrize("seed", [0, 3])
def test_cp_stepper_replays_the_cp_placer(graph, cluster, estimate, seed):
    stepper = CriticalPathStepper(graph, cluster, seed=seed, estimate=estimate)
    assert isinstance(stepper, EpisodeStepper)
    before = np.full(graph.num_nodes, -1)
    steps = []
    while not stepper.done:
        s = stepper.step()
        _check_step(s, graph, before)
        before = s.device
        steps.append(s)
    assert len(steps) == stepper.num_steps == graph.compute_nodes.size
    expected = place("cp", graph, cluster, seed=seed, estimate=estimate)
    assert (stepper.placement().device == expected.device).all()
    with pytest.raises(PlacementError, match="done"):
        stepper.step()
    again = run_episode(stepper)
    assert [s.chosen_node for s in again] == [s.chosen_node for s in steps]
    assert [s.chosen_device for s in again] == [s.chosen_device for s in steps]


def test_cp_stepper_tie_view(graph, cluster):
    stepper = CriticalPathStepper(graph, cluster, plc_view="ties")
    first = stepper.step()  # nothing placed: every device can start at 0
    assert np.allclose(first.plc_probs, 1 / cluster.num_devices)
    for s in run_episode(stepper, max_steps=20):
        assert set(np.unique(s.plc_probs)) <= {0.0, s.plc_probs.max()}
    with pytest.raises(ConfigError, match="plc_view"):
        CriticalPathStepper(graph, cluster, plc_view="argmax")  # type: ignore[arg-type]


def test_make_stepper(graph, cluster):
    s = make_stepper(PlacerChoice("cp", options={"estimate": "additive"}), graph, cluster, seed=1)
    assert s.name == "cp [estimate=additive]"
    assert steppable_placers()[0] == "cp"
    with pytest.raises(ConfigError, match="cannot be stepped; steppable: cp"):
        make_stepper("heft", graph, cluster)
    with pytest.raises(ConfigError, match="no option 'budget'"):
        make_stepper(PlacerChoice("cp", options={"budget": 3}), graph, cluster)


POLICY_KINDS = ("dual", "sel-only", "plc-only", "placeto", "gdp")


@pytest.fixture
def one_torch_thread():
    """Tiny per-step torch ops: one thread avoids OpenMP contention on a busy machine."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_policy_stepper_replays_the_greedy_rollout(small, cluster, kind, one_torch_thread):
    graph = small
    torch = pytest.importorskip("torch")
    policies = pytest.importorskip("doppler_lab.policies.checkpoint")
    from doppler_lab.policies.context import GraphContext
    from doppler_lab.policies.policy_config import PolicyConfig
    from doppler_lab.policies.rollout import GREEDY, run_episodes
    from doppler_lab.viz.widgets import PolicyStepper

    cfg = PolicyConfig(kind=kind, hidden=8, head_hidden=8, mp_steps=1)
    policy = policies.make_policy(cfg, cluster.num_devices, seed=1)
    stepper = PolicyStepper(policy, graph, cluster, seed=5)
    assert isinstance(stepper, EpisodeStepper)
    before = np.full(graph.num_nodes, -1)
    while not stepper.done:
        s = stepper.step()
        _check_step(s, graph, before, greedy=True)
        before = s.device
    ctx = GraphContext(graph, cluster, cfg.layout, policy.config.estimate)  # auto: resolved
    with torch.no_grad():
        enc = policy.encode(ctx)
        rollout = run_episodes(policy, ctx, enc, 1, np.random.default_rng(5), GREEDY, GREEDY)
    assert (stepper.placement().device == rollout.placements[0].device).all()


def test_learned_placer_steps_from_its_checkpoint(small, cluster, tmp_path, one_torch_thread):
    graph = small
    pytest.importorskip("torch")
    if "doppler" not in available_placers():
        pytest.skip("learned placers not installed")
    from doppler_lab.policies.checkpoint import make_policy, save_checkpoint
    from doppler_lab.policies.policy_config import PolicyConfig

    policy = make_policy(PolicyConfig(hidden=8, head_hidden=8, mp_steps=1), 4, seed=2)
    ckpt = str(save_checkpoint(tmp_path / "tiny.pt", policy))
    choice = PlacerChoice("doppler", ckpt, {"samples": 0})  # the greedy rollout, stepped
    stepper = make_stepper(choice, graph, cluster)
    assert stepper.name == "doppler [tiny, samples=0]"
    run_episode(stepper)
    # the placer's greedy rollout alone (no heuristic proposals beside it)
    expected = place("doppler", graph, cluster, seed=0, checkpoint=ckpt, samples=0, partitions=0,
                     clustering=False)  # fmt: skip
    assert (stepper.placement().device == expected.device).all()
    with pytest.raises(ConfigError, match="needs a checkpoint"):
        make_stepper("doppler", graph, cluster)


def test_step_table_and_figure(graph, cluster):
    stepper = CriticalPathStepper(graph, cluster)
    steps = run_episode(stepper)
    table = step_table(steps, graph)
    assert len(table) == len(steps) and (table["sel_prob"] > 0).all()
    assert table["name"].iloc[0] == graph.names[steps[0].chosen_node]
    fig = step_figure(steps[3], graph, stepper.sel_label, stepper.plc_label, len(steps), 5)
    sel, plc, placed = fig.data
    assert len(sel.y) == min(5, steps[3].candidates.size)
    assert graph.names[steps[3].chosen_node] in sel.y
    assert sum(placed.y) == 4  # four nodes placed after step index 3
    assert list(plc.marker.color).count(plc.marker.color[steps[3].chosen_device]) == 1
    assert "step 4/" in fig.layout.title.text


# -- widgets ---------------------------------------------------------------------------------------
def test_explorer_widget_updates_on_change():
    pytest.importorskip("ipywidgets")
    from doppler_lab.viz.widgets import ExplorerWidget

    ex = ExplorerWidget(TINY, "round-robin", "cp")
    assert ex.comparison is not None and "round-robin" in ex.metrics.value
    assert len(ex.gantt.outputs) == 1
    assert "application/vnd.plotly.v1+json" in ex.gantt.outputs[0]["data"]
    assert set(ex.placers[0].options) == set(available_placers())
    assert ex.checkpoints[0].layout.display == "none"  # round-robin needs none
    before = ex.metrics.value
    ex.semantics.value = "paper"
    assert ex.comparison.scenario.semantics == "paper" and ex.metrics.value != before
    ex.placers[0].value = "heft"
    assert "heft" in ex.metrics.value and "heft" in ex.comparison.metrics.index
    ex.options[1].value = "estimate=additive"
    assert "cp [estimate=additive]" in ex.comparison.metrics.index
    assert ex.episode.stepper is not None and ex.episode.stepper.name == "cp [estimate=additive]"
    ex.options[1].value = "budget=3"  # cp has no such option: the status line says so
    assert "budget" in ex.status.value and "cp [estimate=additive]" in ex.comparison.metrics.index


def test_episode_panel_buttons(graph, cluster):
    pytest.importorskip("ipywidgets")
    from doppler_lab.viz.widgets import EpisodePanel

    panel = EpisodePanel(CriticalPathStepper(graph, cluster))
    assert "0/" in panel.info.value and panel.figure.outputs == ()
    panel.step_button.click()
    assert panel.last is not None and panel.last.step == 0
    assert "step 1/" in panel.info.value and len(panel.figure.outputs) == 1
    panel.step10_button.click()
    assert panel.last.step == 10
    panel.end_button.click()
    assert panel.stepper.done and "episode done" in panel.info.value
    panel.reset_button.click()
    assert panel.last is None and not panel.stepper.done
    panel.set_stepper(None, "nothing to step")
    assert panel.info.value == "nothing to step"
    panel.step_button.click()  # no stepper: nothing happens
    assert panel.last is None


def test_explorer_view_draws_without_widgets():
    """Headless (papermill, reports): the explorer's first view as static HTML, the same
    controls' values, table and Gantt charts; plotly.js comes from the page."""
    from doppler_lab.viz.widgets import SNAPSHOT_CLASS, StaticView, explorer_view

    view = explorer_view(TINY, "round-robin", "cp", interactive=False)
    assert isinstance(view, StaticView)
    page = view._repr_html_()
    assert SNAPSHOT_CLASS in page and "Plotly.newPlot" in page  # the Gantt charts
    assert "round-robin" in page and "makespan (us)" in page  # the table, with units
    assert "plotly.js v" not in page  # the library is the page's, loaded once
    assert "flex-wrap:wrap" in page  # the controls' values wrap on narrow screens
    assert "decisions, one step at a time" in page  # the episode panel, in a line
    given = compare(TINY, "round-robin", "cp")
    assert "makespan 0.0" not in explorer_view(TINY, "round-robin", "cp", False, given).html


def test_explorer_widget_carries_its_static_view_and_wraps():
    """In JupyterLab the widget; in a page without a widget manager the static view (one
    output, two representations); the controls wrap below ~1400 px."""
    pytest.importorskip("ipywidgets")
    from doppler_lab.viz.widgets import SNAPSHOT_CLASS, ExplorerWidget, explorer_view

    shown = explorer_view(TINY, "round-robin", "cp", interactive=True)
    bundle = shown._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert SNAPSHOT_CLASS in bundle["text/html"] and "Plotly.newPlot" in bundle["text/html"]
    ex = ExplorerWidget(TINY, "round-robin", "cp")
    assert ex.controls.layout.flex_flow == "row wrap"
    assert ex.episode.widget.children[0].layout.flex_flow == "row wrap"
    assert "overflow-x:auto" in ex.metrics.value  # a wide table scrolls inside its box

"""The encoder, the dual policy and its ablations, Placeto and GDP: shapes, equivalences,
rollouts and the log-probability recompute."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doppler_lab.ir.placement import Placement
from doppler_lab.policies.checkpoint import make_policy
from doppler_lab.policies.context import GraphContext
from doppler_lab.policies.doppler import PlcHeadNumpy, path_sum, smooth_centre, zscore_t
from doppler_lab.policies.encoder import EdgeConditionedConv, MPNNEncoder
from doppler_lab.policies.policy_base import Episodes, segment_log_softmax
from doppler_lab.policies.policy_config import POLICY_KINDS, PolicyConfig
from doppler_lab.policies.rollout import GREEDY, SAMPLE, ActionMode, RolloutOptions, run_episodes


@pytest.fixture(scope="module")
def ctx(small_graph, cluster4):
    return GraphContext(small_graph, cluster4, "doppler9")


def test_edge_conditioned_conv_equals_per_edge_matrices():
    torch.manual_seed(0)
    conv = EdgeConditionedConv(8, 2, 3)
    x = torch.randn(5, 8)
    ei = torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 4, 4]])
    ea = torch.randn(5, 2)
    coef = conv.edge_coefficients(ea)
    out = conv(x, ei, coef, reference=True)
    torch.testing.assert_close(conv(x, ei, coef), out)
    bases = conv.bases.view(8, 4, 8)  # (C_in, K + 1, C_out)
    ref = conv.root(x)
    for e in range(5):
        theta = torch.einsum("k,iko->io", coef[e], bases)
        ref[ei[1, e]] = ref[ei[1, e]] + x[ei[0, e]] @ theta
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("mode", ["basis", "nnconv"])
def test_encoder_shapes(ctx, mode):
    enc = MPNNEncoder(5, 2, hidden=16, steps=2, num_bases=4, edge_mode=mode, edge_hidden=8)
    out = enc(ctx.x, ctx.edge_index, ctx.edge_attr)
    assert out.shape == (ctx.num_nodes, 16)
    out.sum().backward()
    assert all(p.grad is not None for p in enc.parameters())


def test_path_sum_matches_loop(ctx):
    emb = torch.randn(ctx.num_nodes, 3)
    s = path_sum(emb, ctx.b_jumps).numpy()
    nxt = ctx.b_jumps[0].numpy()[:-1] if ctx.b_jumps else np.full(ctx.num_nodes, ctx.num_nodes)
    for i in range(ctx.num_nodes):
        j, acc = i, np.zeros(3)
        while j != ctx.num_nodes:
            acc += emb[j].numpy()
            j = nxt[j]
        np.testing.assert_allclose(s[i], acc, rtol=1e-5, atol=1e-5)


def test_segment_log_softmax():
    logits = torch.tensor([1.0, 2.0, 0.5, -1.0, 3.0])
    seg = torch.tensor([0, 0, 1, 1, 1])
    logp, ent = segment_log_softmax(logits, seg, 2)
    ref0 = torch.log_softmax(logits[:2], 0)
    ref1 = torch.log_softmax(logits[2:], 0)
    torch.testing.assert_close(logp, torch.cat([ref0, ref1]))
    torch.testing.assert_close(ent[1], -(ref1.exp() * ref1).sum())


@pytest.mark.parametrize("norm", ["smooth", "zscore"])
def test_numpy_head_equals_torch_head(ctx, norm):
    pol = make_policy(PolicyConfig(hidden=16, head_hidden=8, placed_norm=norm), 4)
    with torch.no_grad():
        st = pol.plc.static(ctx)
        nodes = torch.tensor([0, 3, 5, 6])
        feats = torch.randn(4, 4, 9)
        placed = torch.randn(4, 4, 16) * torch.tensor([0.1, 1.0, 3.0, 0.0])[:, None, None]
        ref = pol.plc.scores(st, nodes, feats, placed).numpy()
    out = PlcHeadNumpy(pol.plc)(st.node_term.numpy()[nodes.numpy()], feats.numpy(), placed.numpy())
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def _numpy_head(head, node_term, feats, placed):
    """The head as plain numpy expressions (the rollouts' scores before it was compiled)."""
    a = feats @ head.dev_w
    a += head.dev_b
    np.maximum(a, 0.1 * a, out=a)
    inv_d = 1.0 / placed.shape[-2]
    diff = placed - np.add.reduce(placed, axis=-2, keepdims=True) * inv_d
    var = np.add.reduce(diff * diff, axis=-2, keepdims=True) * inv_d
    diff /= np.sqrt(var + float(head.var_add)) + float(head.std_add)
    pre = a @ head.w_dev
    pre += diff @ head.w_placed
    pre += node_term[:, None, :]
    np.maximum(pre, 0.1 * pre, out=pre)
    return pre @ head.out_w + float(head.out_b)


@pytest.mark.parametrize("norm", ["smooth", "zscore"])
def test_compiled_head_is_the_numpy_head_to_the_bit(norm):
    """Placements of a seed stay what they were: the compiled head's scores are the plain numpy
    expressions' to the last bit (zeros of either sign included), whatever the batch size."""
    pol = make_policy(PolicyConfig(hidden=16, head_hidden=8, placed_norm=norm), 4, seed=2)
    head = PlcHeadNumpy(pol.plc)
    rng = np.random.default_rng(0)
    for trial in range(40):
        b, d = int(rng.integers(1, 18)), int(rng.integers(1, 9))
        feats = (rng.standard_normal((b, d, 9)) * rng.choice([0.01, 1.0, 100.0])).astype(np.float32)
        placed = (rng.standard_normal((b, d, 16)) * rng.choice([0.0, 1e-3, 1.0, 50.0])).astype(
            np.float32
        )
        if trial % 4 == 0:
            placed[..., :8] = rng.choice([0.0, -0.0, 1.0], size=(b, d, 8))
        node_term = rng.standard_normal((b, 8)).astype(np.float32)
        out = head(node_term, feats, placed)
        ref = _numpy_head(head, node_term, feats, placed)
        assert out.dtype == ref.dtype == np.float32
        np.testing.assert_array_equal(out.view(np.int32), ref.view(np.int32))
        np.testing.assert_array_equal(head(node_term[:1], feats[:1], placed[:1]), out[:1])


def test_smooth_placed_norm_has_bounded_gradient():
    """The z-score's gradient grows as 1 / std when the devices' placed sums nearly agree (one
    node placed, a channel near zero): that is what froze Stage II; the smooth norm's does not."""
    grads = {}
    for eps in (1e-1, 1e-3, 1e-5):
        for name, fn in (("smooth", smooth_centre), ("zscore", zscore_t)):
            placed = torch.zeros(1, 4, 3)
            placed[0, 0] = torch.tensor([eps, 1.0, 5.0])
            placed.requires_grad_(True)
            fn(placed, -2)[0, 0, 0].backward()  # device 0, channel 0
            grads[name, eps] = float(placed.grad[..., 0].abs().max())
    assert max(grads["smooth", e] for e in (1e-1, 1e-3, 1e-5)) <= 1.0
    assert grads["zscore", 1e-5] > 1e3 * grads["zscore", 1e-1]
    # far from agreement both are the same standardisation, up to the +1 in the variance
    x = torch.tensor([[0.0, 10.0, 20.0, 30.0]])
    torch.testing.assert_close(smooth_centre(x, -1), zscore_t(x, -1), rtol=0.02, atol=0.0)


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_rollout_and_log_probs(ctx, small_graph, kind):
    pol = make_policy(PolicyConfig(kind=kind, hidden=16, head_hidden=16, mp_steps=2), 4, seed=1)
    enc = pol.encode(ctx)
    rng = np.random.default_rng(0)
    ep = run_episodes(pol, ctx, enc, 3, rng, SAMPLE, SAMPLE, RolloutOptions(record_teacher=True))
    n = ctx.num_nodes
    assert ep.nodes.shape == (3, n) and ep.devices.shape == (3, n)
    assert ep.dev_feats.shape == (3, n, 4, 9)
    for k, p in enumerate(ep.placements):
        assert isinstance(p, Placement)
        p.validate(small_graph, 4)
        np.testing.assert_array_equal(p.device[ctx.features.nodes[ep.nodes[k]]], ep.devices[k])
        assert sorted(ep.nodes[k].tolist()) == list(range(n))
    terms = pol.log_probs(ctx, enc, ep)
    learned = {"dual": ("sel", "plc"), "sel-only": ("sel",), "plc-only": ("plc",)}.get(
        kind, ("plc",)
    )
    for half in ("sel", "plc"):
        x = getattr(terms, f"{half}_logp")
        assert (x is not None) == (half in learned)
        if x is not None:
            assert x.shape == (3, n) and (x <= 1e-6).all()
            assert getattr(terms, f"{half}_teacher_ll").shape == (3, n)
    loss = -sum(x.sum() for x in (terms.sel_logp, terms.plc_logp) if x is not None)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in pol.parameters())


@pytest.mark.parametrize("kind", ["dual", "placeto", "gdp"])
def test_greedy_actions_are_the_most_likely(ctx, kind):
    pol = make_policy(PolicyConfig(kind=kind, hidden=16, head_hidden=16, mp_steps=2), 4, seed=2)
    with torch.no_grad():
        enc = pol.encode(ctx)
        ep = run_episodes(pol, ctx, enc, 1, np.random.default_rng(0), GREEDY, GREEDY)
        terms = pol.log_probs(ctx, enc, ep)
    # the recompute agrees with the rollout: greedy picks have probability >= 1 / #choices
    assert (terms.plc_logp >= np.log(1 / 4) - 1e-5).all()
    if terms.sel_logp is not None:
        counts = np.diff(ep.cand_ptr)
        assert (terms.sel_logp[0].numpy() >= -np.log(counts) - 1e-5).all()


def test_teacher_mode_follows_the_teacher(ctx):
    pol = make_policy(PolicyConfig(hidden=16, head_hidden=16, mp_steps=2), 4)
    with torch.no_grad():
        enc = pol.encode(ctx)
        ep = run_episodes(
            pol,
            ctx,
            enc,
            2,
            np.random.default_rng(0),
            ActionMode(teacher=1.0),
            ActionMode(teacher=1.0),
            RolloutOptions(record_teacher=True),
        )
    took = ep.plc_teacher[np.arange(2)[:, None], np.arange(ctx.num_nodes), ep.devices]
    assert took.all()
    chosen = ep.cand_idx == np.repeat(ep.nodes.reshape(-1), np.diff(ep.cand_ptr))
    assert ep.sel_teacher[chosen].all()


def test_episode_select_and_concat(ctx):
    pol = make_policy(PolicyConfig(hidden=16, head_hidden=16, mp_steps=2), 4)
    enc = pol.encode(ctx)
    recording = RolloutOptions(record_teacher=True)
    ep = run_episodes(pol, ctx, enc, 4, np.random.default_rng(3), SAMPLE, SAMPLE, recording)
    full = pol.log_probs(ctx, enc, ep)
    parts = [ep.select(slice(0, 1)), ep.select(np.array([1, 2])), ep.select(slice(3, 4))]
    again = pol.log_probs(ctx, enc, Episodes.concat(parts))
    torch.testing.assert_close(full.sel_logp, again.sel_logp)
    torch.testing.assert_close(full.plc_teacher_ll, again.plc_teacher_ll)
    back = Episodes.from_state(ep.select(slice(1, 3)).to_state())
    torch.testing.assert_close(pol.log_probs(ctx, enc, back).plc_logp, full.plc_logp[1:3])


def test_rollouts_are_deterministic_by_seed(ctx):
    pol = make_policy(PolicyConfig(hidden=16, head_hidden=16, mp_steps=2), 4)
    with torch.no_grad():
        enc = pol.encode(ctx)
        a = run_episodes(pol, ctx, enc, 2, np.random.default_rng(5), SAMPLE, SAMPLE)
        b = run_episodes(pol, ctx, enc, 2, np.random.default_rng(5), SAMPLE, SAMPLE)
    np.testing.assert_array_equal(a.nodes, b.nodes)
    np.testing.assert_array_equal(a.devices, b.devices)


def test_dual_policy_runs_on_any_device_count(small_graph):
    from doppler_lab.hardware.cluster import make_cluster

    pol = make_policy(PolicyConfig(hidden=16, head_hidden=16, mp_steps=2), 4)
    ctx8 = GraphContext(small_graph, make_cluster("uniform", 8), "doppler9")
    with torch.no_grad():
        ep = run_episodes(pol, ctx8, pol.encode(ctx8), 1, np.random.default_rng(0), GREEDY, GREEDY)
    ep.placements[0].validate(small_graph, 8)


@pytest.mark.parametrize("fused_limit", [0, 10**9])
def test_aggregate_first_equals_message_passing(ctx, monkeypatch, fused_limit):
    monkeypatch.setattr(EdgeConditionedConv, "FUSED_LIMIT", fused_limit)
    torch.manual_seed(0)
    conv = EdgeConditionedConv(16, 2, 4)
    x = torch.randn(ctx.num_nodes, 16, requires_grad=True)
    coef = conv.edge_coefficients(ctx.edge_attr)
    fast = conv(x, ctx.edge_index, coef)
    ref = conv(x, ctx.edge_index, coef, reference=True)
    torch.testing.assert_close(fast, ref, rtol=1e-4, atol=1e-5)
    g1 = torch.autograd.grad(fast.sum(), [x, conv.bases])
    g2 = torch.autograd.grad(ref.sum(), [x, conv.bases])
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fused_limit", [10**9, 0])
def test_compiled_inference_aggregation_is_index_add_to_the_bit(ctx, monkeypatch, fused_limit):
    """Without autograd the conv aggregates compiled; the sums are index_add's to the bit (zeros
    of either sign included), so an encoding does not depend on whether gradients are on."""
    monkeypatch.setattr(EdgeConditionedConv, "FUSED_LIMIT", fused_limit)
    torch.manual_seed(1)
    conv = EdgeConditionedConv(16, 2, 4)
    x = torch.randn(ctx.num_nodes, 16) * 10.0 ** torch.randint(-3, 3, (ctx.num_nodes, 1))
    x[x.abs() < 0.1] = 0.0
    x[:3] = -0.0
    coef = conv.edge_coefficients(ctx.edge_attr).detach()
    with torch.enable_grad():
        ref = conv(x, ctx.edge_index, coef)
    with torch.no_grad():
        fast = conv(x, ctx.edge_index, coef)
    assert torch.equal(fast.view(torch.int32), ref.detach().view(torch.int32))


def _pyg_encoder_forward(enc: MPNNEncoder, x, edge_index, edge_attr):
    """``enc``'s forward pass with every step's neighbour sums formed by PyG message passing."""
    from torch.nn import functional as F

    from doppler_lab.policies.pyg_reference import weighted_sums

    conv = enc.conv
    h = F.relu(enc.project(x))
    coef = conv.edge_coefficients(edge_attr)
    for _ in range(enc.steps):
        agg = weighted_sums(h, edge_index, coef).reshape(h.shape[0], -1)
        h = enc.gru(F.relu(conv._combine(h, agg)), h)
    return F.leaky_relu(h, 0.1)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_plain_torch_encoder_equals_pyg_message_passing_to_the_bit(small_graph, cluster4, grad):
    """The encoder needs no torch_geometric: the shipped general policy's encoders give PyG's
    sums and outputs bit for bit, compiled (inference) and by ``index_add`` (training)."""
    from doppler_lab.policies.checkpoint import load_policy
    from doppler_lab.policies.pretrained import GENERAL_CHECKPOINT, resolve_checkpoint

    policy, _ = load_policy(resolve_checkpoint(GENERAL_CHECKPOINT), num_devices=4)
    ctx10 = GraphContext(small_graph, cluster4, policy.config.layout)
    for enc in (policy.sel.encoder, policy.plc.encoder):
        with torch.set_grad_enabled(grad):
            ours = enc(ctx10.x, ctx10.edge_index, ctx10.edge_attr)
            ref = _pyg_encoder_forward(enc, ctx10.x, ctx10.edge_index, ctx10.edge_attr)
        assert torch.equal(ours.detach().view(torch.int32), ref.detach().view(torch.int32))


def test_encoder_modules_do_not_import_torch_geometric():
    """The layers a DOPPLER policy is built of import no PyG (a fresh interpreter)."""
    import subprocess
    import sys

    code = (
        "import sys; from doppler_lab.policies.checkpoint import make_policy;"
        "from doppler_lab.policies.policy_config import PolicyConfig;"
        "make_policy(PolicyConfig(hidden=8), 2); print('torch_geometric' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"

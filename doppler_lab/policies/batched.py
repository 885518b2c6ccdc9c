"""The compiled steps of a :class:`~doppler_lab.policies.rollout.Rollout` in its plain modes.

When no decision can come from the Critical Path teacher, an anchor or a uniform draw (greedy
or sampled SEL and PLC at any temperature: inference, and Stage II training), a rollout keeps
its K episodes in one :class:`~doppler_lab.timing.schedule.ScheduleBatch` and each step is two
compiled calls around the policy's one batched PLC call: :func:`select_step` (each episode's
SEL choice, the selected node's earliest starts and raw device features) and
:func:`place_step` (each episode's PLC choice and the assignment).

The choices are those of the per-episode loop to the bit, random draws included: a sampled
choice adds the softmax weights ``exp(z - max z)`` (computed by numpy, exactly as the loop does)
in order and takes the first whose running sum exceeds ``u`` times the total, ``u`` the
episode's draw cast to the weights' precision (as numpy casts a Python float there).

The arrays that travel together are records: :class:`Mode`, :class:`StepBatch`,
:class:`SelArrays`, :class:`SelDraws`, :class:`PlcScores`, :class:`SelectOut`,
:class:`PlaceOut`, :class:`PlcHead`, :class:`PlainRun` (and, inside them, the schedule's
:class:`~doppler_lab.timing.schedule.ScheduleRecord` and
:class:`~doppler_lab.timing.schedule.BatchArrays`). Python passes each as a plain tuple in the field order of
its named tuple and the compiled step names it again on entry (as the simulator kernels do,
:mod:`doppler_lab.timing.sim._kernels`: numba types a plain tuple of arrays in C, a named tuple
through Python's ``typeof`` on every call).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, objmode

from ..timing.schedule import BatchArrays, batch_assign, batch_device_features, batch_est
from .doppler import HeadWeights, add_placed, head_logits
from .features import extend_device_features, scale_device_features

# numba's on-disk cache of these kernels is checked against this file alone, while they compile
# in the kernels they call from features.py, doppler.py and timing/schedule.py: the cache folder
# is therefore one per version of every kernel source (doppler_lab.house.jitcache), so a change
# there compiles these again (a stale cached kernel once left doppler11's column 10 unwritten)

#: how a step chooses: the argmax, a draw from the softmax, or the topological order (SEL)
GREEDY, SAMPLE, TOPO = 0, 1, 2


class Mode(NamedTuple):
    """How one half of the policy (SEL or PLC) chooses in every episode of a step."""

    kind: int  # GREEDY, SAMPLE or TOPO (SEL only)
    lead: int  # the first ``lead`` episodes choose by GREEDY (unless ``kind`` is TOPO)


class StepBatch(NamedTuple):
    """A :class:`~doppler_lab.timing.schedule.ScheduleBatch` as the compiled steps read it."""

    record: tuple  # the graph and cost arrays (ScheduleRecord, ScheduleBatch.record)
    arrays: tuple  # the K states' arrays, stacked (BatchArrays, ScheduleBatch.arrays)
    estimate: int  # ESTIMATE_CODES of the estimate
    extra: tuple  # the graph's feature_args (doppler9 and doppler10 features)


class SelArrays(NamedTuple):
    """What SEL reads of the graph."""

    scores: np.ndarray  # (n,) static SEL score per local node (empty: topological SEL)
    local: np.ndarray  # (N,) local id per global node
    topo: np.ndarray  # the compute nodes (global) in topological order


class SelDraws(NamedTuple):
    """A sampled SEL choice's draws (empty arrays when SEL does not sample)."""

    weights: np.ndarray  # softmax weights of each episode's candidates (sel_logits, exponentiated)
    ptr: np.ndarray  # (K,) where each episode's weights start
    u: np.ndarray  # (K,) a uniform each (float64)


class PlcScores(NamedTuple):
    """PLC's scores of every episode at a step."""

    logits: np.ndarray  # (K, D) the policy's logits (GREEDY: their argmax)
    weights: np.ndarray  # (K, D) the softmax weights (SAMPLE)
    u: np.ndarray  # (K,) a uniform each (float64; SAMPLE)


class SelectOut(NamedTuple):
    """What :func:`select_step` writes."""

    selected: np.ndarray  # (K,) the selected global node
    nodes: np.ndarray  # (K, T) its local id at nodes[:, t]
    est: np.ndarray  # (K, D) its earliest starts
    raw: np.ndarray  # (K, D, F) its raw device features (F = 5, 9 or 10)
    norm: np.ndarray  # (K, D, F) float32 their scaled normalisation (time_unit > 0)
    cand_rec: np.ndarray  # the candidates' local ids, step-major (learned SEL only)
    counts: np.ndarray  # (K, T) their number at counts[:, t] (learned SEL only)


class PlaceOut(NamedTuple):
    """What :func:`place_step` writes."""

    devices: np.ndarray  # (K, T) the device at devices[:, t]
    partial: np.ndarray  # (K, T) the makespan before the step (times the time scale)
    span: np.ndarray  # (K,) the makespan after it


class PlcHead(NamedTuple):
    """The policy's compiled PLC head in a fused rollout (of
    :class:`~doppler_lab.policies.doppler.PlacedSums`)."""

    weights: tuple  # HeadWeights (PlacedSums.kernel_weights)
    node_term: np.ndarray  # (n, H) the nodes' first-layer terms
    emb: np.ndarray  # (n, C) node embeddings
    sums: np.ndarray  # (K, D, C) each episode's placed-set sums, updated


class PlainRun(NamedTuple):
    """How a fused rollout (:func:`run_plain`) chooses."""

    sel_kind: int  # GREEDY, SAMPLE or TOPO
    plc_kind: int  # GREEDY or SAMPLE
    lead: int  # the first ``lead`` episodes choose by GREEDY
    sel_temperature: float  # SEL's sampling temperature, of the scores' dtype
    plc_temperature: float  # PLC's, float32
    time_unit: float  # the ``scaled`` layout's time unit (> 0)


@njit(cache=True)
def _argmax(x, lo, m):  # pragma: no cover - compiled
    """``np.argmax(x[lo:lo + m])`` (the first maximum; the first NaN if any)."""
    best = 0
    top = x[lo]
    if top != top:
        return 0
    for i in range(1, m):
        y = x[lo + i]
        if y != y:
            return i
        if y > top:
            best, top = i, y
    return best


@njit(cache=True)
def _draw(weights, lo, m, u):  # pragma: no cover - compiled
    """Index of a draw from ``weights[lo:lo + m]`` with uniform ``u`` (float64):
    the first running sum above ``u`` times the total (``searchsorted(..., side="right")`` of
    the cumulative sum), at most ``m - 1``."""
    csum = np.empty(m + 1, weights.dtype)
    csum[m] = u  # u in the weights' precision, as numpy casts a Python float
    acc = weights[lo]
    csum[0] = acc
    for i in range(1, m):
        acc = acc + weights[lo + i]
        csum[i] = acc
    x = csum[m] * csum[m - 1]
    i = 0
    while i < m and not csum[i] > x:
        i += 1
    return min(i, m - 1)


@njit(cache=True)
def sel_logits(scores, local, cand, ncand, temperature, out, ptr, table):  # pragma: no cover
    """Each episode's candidates' SEL scores over ``temperature`` minus their maximum, the
    exponent of its softmax weights; or, with a ``table``, the weights themselves.

    Args:
        scores: ``(n,)`` static SEL score per local node.
        local: ``(N,)`` local id per global node.
        cand, ncand: each episode's candidates and their number (of the batch's
            :attr:`~doppler_lab.timing.schedule.ScheduleBatch.arrays`).
        temperature: the sampling temperature, of the scores' dtype.
        out: written: episode k's values at ``out[ptr[k]:ptr[k] + ncand[k]]``.
        ptr: ``(K,)`` written: where each episode's values start.
        table: ``(n, n)`` numpy's ``np.exp(z[:, None] - z[None, :])`` of ``z = scores /
            temperature`` (no NaN): the weight of node i when node j has the largest score,
            written instead of the exponent; ``(0, 0)``: the exponents.

    Returns:
        The number of values written.
    """
    weights = table.shape[0] > 0
    pos = 0
    for k in range(ncand.shape[0]):
        ptr[k] = pos
        m = ncand[k]
        row = cand[k]
        top = scores[local[row[0]]] / temperature
        best = local[row[0]]
        for i in range(m):
            z = scores[local[row[i]]] / temperature
            out[pos + i] = z
            if z > top:
                best = local[row[i]]
            top = max(top, z)
        for i in range(m):
            out[pos + i] = table[local[row[i]], best] if weights else out[pos + i] - top
        pos += m
    return pos


@njit(cache=True, error_model="numpy")
def softmax_exponents(logits, temperature, out):  # pragma: no cover - compiled
    """``z - max z`` per row of ``z = logits / temperature`` ``(K, D)`` into ``out`` (float32, as
    numpy computes ``z - z.max(axis=1, keepdims=True)``: a NaN in a row makes the row NaN)."""
    for k in range(logits.shape[0]):
        top = logits[k, 0] / temperature
        for d in range(logits.shape[1]):
            z = logits[k, d] / temperature
            out[k, d] = z
            if top == top and (z > top or z != z):
                top = z
        for d in range(logits.shape[1]):
            out[k, d] -= top


@njit(cache=True)
def _select(t, k, mode, sel, cand, ncand, draw):  # pragma: no cover - compiled
    """Episode ``k``'s SEL choice at step ``t`` (see :func:`select_step`; ``mode``, ``sel``
    and ``draw`` named)."""
    if mode.kind == TOPO:
        return sel.topo[t]
    m = ncand[k]
    row = cand[k]
    if mode.kind == SAMPLE and k >= mode.lead:
        return row[_draw(draw.weights, draw.ptr[k], m, draw.u[k])]
    return row[_argmax(sel.scores[sel.local[row[:m]]], 0, m)]


@njit(cache=True)
def _node_state(batch, k, v, est, raw):  # pragma: no cover - compiled
    """The earliest starts ``est`` ``(D,)`` and raw device features ``raw`` ``(D, F)`` of
    node ``v`` in episode ``k`` (``batch``: a named :class:`StepBatch`)."""
    record, arrays = batch.record, batch.arrays
    batch_est(record, arrays, batch.estimate, k, v, est)
    batch_device_features(record, arrays, k, v, est, raw)
    if raw.shape[1] >= 9:
        extend_device_features(record, batch.extra, v, BatchArrays(*arrays).device[k], raw)


@njit(cache=True)
def _place(k, mode, batch, v, est, plc):  # pragma: no cover - compiled
    """Episode ``k``'s PLC choice for node ``v`` and its assignment (see :func:`place_step`;
    ``mode``, ``batch`` and ``plc`` named); returns the device."""
    ndev = plc.logits.shape[1]
    if mode.kind == SAMPLE and k >= mode.lead:
        d = _draw(plc.weights[k], 0, ndev, plc.u[k])
    else:
        d = _argmax(plc.logits[k], 0, ndev)
    batch_assign(batch.record, batch.arrays, batch.estimate, k, v, d, est)
    return d


@njit(cache=True)
def select_step(t, mode, batch, sel, draw, out, pos, time_unit):  # pragma: no cover - compiled
    """SEL's choice in every episode of step ``t``, then the chosen node's earliest starts and
    raw device features (and, with ``time_unit > 0``, their ``scaled`` normalisation).

    Args:
        t: the step.
        mode: :class:`Mode`: :data:`GREEDY`, :data:`SAMPLE` or :data:`TOPO`, and the greedy lead.
        batch: :class:`StepBatch`: the schedule batch and the graph's feature arguments.
        sel: :class:`SelArrays`.
        draw: :class:`SelDraws` of a sampled choice.
        out: :class:`SelectOut`, written (the candidate record from ``cand_rec[pos]``; ``norm``
            only with ``time_unit > 0``).
        pos: where the candidate record goes on.
        time_unit: the ``scaled`` layout's time unit (0: no normalisation;
            :func:`~doppler_lab.policies.features.scale_device_features`).

    Returns:
        The new end of the candidate record.
    """
    mode, batch, sel = Mode(*mode), StepBatch(*batch), SelArrays(*sel)
    draw, out = SelDraws(*draw), SelectOut(*out)
    local = sel.local
    states = BatchArrays(*batch.arrays)
    cand, ncand = states.cand, states.ncand
    for k in range(out.selected.shape[0]):
        v = _select(t, k, mode, sel, cand, ncand, draw)
        if mode.kind != TOPO:
            m = ncand[k]
            row = cand[k]
            for i in range(m):
                out.cand_rec[pos + i] = local[row[i]]
            pos += m
            out.counts[k, t] = m
        out.selected[k] = v
        out.nodes[k, t] = local[v]
        _node_state(batch, k, v, out.est[k], out.raw[k])
    if time_unit > 0:
        scale_device_features(out.raw, time_unit, out.norm)
    return pos


@njit(cache=True)
def place_step(t, mode, batch, selected, est, plc, out, scale):  # pragma: no cover - compiled
    """PLC's choice in every episode of step ``t`` and its assignment.

    Args:
        t: the step.
        mode: :class:`Mode`: :data:`GREEDY` (the argmax of the logits) or :data:`SAMPLE` (a
            draw from the softmax weights), and the greedy lead.
        batch: :class:`StepBatch`.
        selected, est: each episode's selected node and its earliest starts.
        plc: :class:`PlcScores`.
        out: :class:`PlaceOut`, written: the device, the schedule's makespan before the step
            (times ``scale``) and after it.
        scale: the graph's time scale.
    """
    mode, batch, plc, out = Mode(*mode), StepBatch(*batch), PlcScores(*plc), PlaceOut(*out)
    finish = BatchArrays(*batch.arrays).finish
    span = out.span
    for k in range(selected.shape[0]):
        v = selected[k]
        out.partial[k, t] = span[k]
        out.devices[k, t] = _place(k, mode, batch, v, est[k], plc)
        span[k] = max(span[k], finish[k, v] * scale)


@njit(cache=True)
def _numpy_exp(x, out):  # pragma: no cover - compiled
    """``np.exp(x, out=out)`` by numpy itself (its float32 exponential, to the bit)."""
    with objmode():
        np.exp(x, out=out)


@njit(cache=True)
def run_plain(run, batch, sel, sel_table, uniforms, plc, devices):  # pragma: no cover
    """Every step of a rollout in the plain modes in one compiled call, without a record: the
    decisions of :func:`select_step`, the policy's compiled PLC head
    (:func:`~doppler_lab.policies.doppler.head_logits`) and :func:`place_step`, to the bit
    (the softmax weights are numpy's exponentials, as in the stepped rollout).

    Args:
        run: :class:`PlainRun`: SEL's and PLC's kinds, the greedy lead, SEL's and PLC's
            sampling temperatures, the ``scaled`` layout's time unit.
        batch: :class:`StepBatch` (a fresh schedule batch).
        sel: :class:`SelArrays`.
        sel_table: :func:`sel_logits`'s table: SEL's softmax weights read from it instead of
            an exponential per step (``(0, 0)``: computed per step).
        uniforms: ``(T, S)`` every draw of the rollout (float64), in the order the stepped
            rollout draws them: per step, one per sampling episode for SEL (when it samples),
            then one per sampling episode for PLC (when it samples).
        plc: :class:`PlcHead`.
        devices: ``(K, T)`` written: each episode's device per step.
    """
    run, batch, sel = PlainRun(*run), StepBatch(*batch), SelArrays(*sel)
    sel_kind, plc_kind, lead = run.sel_kind, run.plc_kind, run.lead
    sel_mode, plc_mode = Mode(sel_kind, lead), Mode(plc_kind, lead)
    scores, local = sel.scores, sel.local
    head = PlcHead(*plc)
    weights, node_term, emb, sums = head.weights, head.node_term, head.emb, head.sums
    w = HeadWeights(*weights)
    states = BatchArrays(*batch.arrays)
    cand, ncand = states.cand, states.ncand
    k_eps, t_steps = devices.shape
    ndev, fdim, hidden = sums.shape[1], w.dev_w_t.shape[1], w.w_dev.shape[1]
    nsel = k_eps - lead if sel_kind == SAMPLE else 0
    sel_buf = np.empty(max(1, k_eps * cand.shape[1]), scores.dtype)
    sel_w = np.empty_like(sel_buf)
    ptr = np.zeros(k_eps, dtype=np.int64)
    selected = np.empty(k_eps, dtype=np.int64)
    rows = np.empty(k_eps, dtype=np.int64)
    chosen = np.empty(k_eps, dtype=np.int64)
    est = np.empty((k_eps, ndev))
    raw = np.empty((k_eps, ndev, fdim))
    norm = np.empty((k_eps, ndev, fdim), dtype=np.float32)
    scratch = (  # a HeadScratch
        np.empty((k_eps, ndev, w.dev_w_t.shape[0]), dtype=np.float32),
        np.empty_like(sums),
        np.empty((k_eps, ndev, hidden), dtype=np.float32),
        np.empty((k_eps, ndev, hidden), dtype=np.float32),
    )
    logits = np.empty((k_eps, ndev), dtype=np.float32)
    plc_w = np.empty((k_eps, ndev), dtype=np.float32)
    u_sel = np.zeros(k_eps)
    u_plc = np.zeros(k_eps)
    draw = SelDraws(sel_w, ptr, u_sel)
    scored = PlcScores(logits, plc_w, u_plc)
    for t in range(t_steps):
        for k in range(lead, k_eps):
            if sel_kind == SAMPLE:
                u_sel[k] = uniforms[t, k - lead]
            if plc_kind == SAMPLE:
                u_plc[k] = uniforms[t, nsel + k - lead]
        if sel_kind == SAMPLE:
            if sel_table.shape[0] > 0:
                sel_logits(scores, local, cand, ncand, run.sel_temperature, sel_w, ptr, sel_table)
            else:
                m = sel_logits(
                    scores, local, cand, ncand, run.sel_temperature, sel_buf, ptr, sel_table
                )
                _numpy_exp(sel_buf[:m], sel_w[:m])
        for k in range(k_eps):
            v = _select(t, k, sel_mode, sel, cand, ncand, draw)
            selected[k] = v
            rows[k] = local[v]
            _node_state(batch, k, v, est[k], raw[k])
        scale_device_features(raw, run.time_unit, norm)
        head_logits(weights, node_term, rows, norm, sums, scratch, logits)
        if plc_kind == SAMPLE:
            softmax_exponents(logits, run.plc_temperature, plc_w)
            _numpy_exp(plc_w, plc_w)
        for k in range(k_eps):
            d = _place(k, plc_mode, batch, selected[k], est[k], scored)
            chosen[k] = d
            devices[k, t] = d
        add_placed(sums, emb, rows, chosen)

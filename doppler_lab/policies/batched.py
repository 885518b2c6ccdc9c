"""The compiled steps of a :class:`~doppler_lab.policies.rollout.Rollout` in its plain modes.

When no decision can come from the Critical Path teacher, an anchor or a uniform draw (greedy
or sampled SEL and PLC at any temperature: inference, and Stage II training), a rollout keeps
its K episodes in one :class:`~doppler_lab.schedule.ScheduleBatch` and each step is two
compiled calls around the policy's one batched PLC call: :func:`select_step` (each episode's
SEL choice, the selected node's earliest starts and raw device features) and
:func:`place_step` (each episode's PLC choice and the assignment).

The choices are those of the per-episode loop to the bit, random draws included: a sampled
choice adds the softmax weights ``exp(z - max z)`` (computed by numpy, exactly as the loop does)
in order and takes the first whose running sum exceeds ``u`` times the total, ``u`` the
episode's draw cast to the weights' precision (as numpy casts a Python float there).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..schedule import batch_assign, batch_device_features, batch_est
from .features import extend_device_features, scale_device_features

#: how a step chooses: the argmax, a draw from the softmax, or the topological order (SEL)
GREEDY, SAMPLE, TOPO = 0, 1, 2


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
def sel_logits(scores, local, cand, ncand, temperature, out, ptr):  # pragma: no cover - compiled
    """Each episode's candidates' SEL scores over ``temperature`` minus their maximum, the
    exponent of its softmax weights.

    Args:
        scores: ``(n,)`` static SEL score per local node.
        local: ``(N,)`` local id per global node.
        cand, ncand: each episode's candidates and their number (of the batch's
            :attr:`~doppler_lab.schedule.ScheduleBatch.arrays`).
        temperature: the sampling temperature, of the scores' dtype.
        out: written: episode k's values at ``out[ptr[k]:ptr[k] + ncand[k]]``.
        ptr: ``(K,)`` written: where each episode's values start.

    Returns:
        The number of values written.
    """
    pos = 0
    for k in range(ncand.shape[0]):
        ptr[k] = pos
        m = ncand[k]
        row = cand[k]
        top = scores[local[row[0]]] / temperature
        for i in range(m):
            z = scores[local[row[i]]] / temperature
            out[pos + i] = z
            top = max(top, z)
        for i in range(m):
            out[pos + i] -= top
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
def select_step(
    t, kind, lead, record, arrays, timing, edge_cost, sel, draw, out, pos, time_unit, norm
):  # pragma: no cover
    """SEL's choice in every episode of step ``t``, then the chosen node's earliest starts and
    raw device features (and, with ``time_unit > 0``, their ``scaled`` normalisation).

    Args:
        t: the step.
        kind: :data:`GREEDY`, :data:`SAMPLE` or :data:`TOPO`.
        lead: the first ``lead`` episodes choose by :data:`GREEDY` (unless ``kind`` is TOPO).
        record, arrays, timing: the :class:`~doppler_lab.schedule.ScheduleBatch`.
        edge_cost: ``(E,)`` mean transfer cost per edge (``doppler9`` features).
        sel: ``(scores, local, topo)``: static SEL score per local node, local id per global
            node, the compute nodes (global) in topological order.
        draw: ``(weights, ptr, u)`` of a sampled choice: softmax weights of each episode's
            candidates (:func:`sel_logits`, exponentiated), where they start, a uniform each
            (float64).
        out: ``(selected, nodes, est, raw, cand_rec, counts)``: written: selected global node
            ``(K,)``, its local id ``nodes[:, t]``, earliest starts ``(K, D)``, raw device
            features ``(K, D, F)`` (F = 5 or 9), the candidates' local ids (step-major from
            ``cand_rec[pos]``) and their number ``counts[:, t]`` (learned SEL only).
        pos: where the candidate record goes on.
        time_unit: the ``scaled`` layout's time unit (0: no normalisation).
        norm: ``(K, D, F)`` written (``time_unit > 0``): the normalised device features
            (:func:`~doppler_lab.policies.features.scale_device_features`).

    Returns:
        The new end of the candidate record.
    """
    scores, local, topo = sel
    weights, ptr, u = draw
    selected, nodes, est, raw, cand_rec, counts = out
    device, cand, ncand = arrays[0], arrays[10], arrays[11]
    for k in range(selected.shape[0]):
        if kind == TOPO:
            v = topo[t]
        else:
            m = ncand[k]
            row = cand[k]
            if kind == SAMPLE and k >= lead:
                v = row[_draw(weights, ptr[k], m, u[k])]
            else:
                v = row[_argmax(scores[local[row[:m]]], 0, m)]
            for i in range(m):
                cand_rec[pos + i] = local[row[i]]
            pos += m
            counts[k, t] = m
        selected[k] = v
        nodes[k, t] = local[v]
        batch_est(record, arrays, timing, k, v, est[k])
        batch_device_features(record, arrays, k, v, est[k], raw[k])
        if raw.shape[2] == 9:
            extend_device_features(record, edge_cost, v, device[k], raw[k])
    if time_unit > 0:
        scale_device_features(raw, time_unit, norm)
    return pos


@njit(cache=True)
def place_step(
    t, kind, lead, record, arrays, timing, selected, est, logits, weights, u, out, scale
):  # pragma: no cover
    """PLC's choice in every episode of step ``t`` and its assignment.

    Args:
        t: the step.
        kind: :data:`GREEDY` (the argmax of ``logits``) or :data:`SAMPLE` (a draw from the
            softmax ``weights`` with ``u``, a uniform each, float64).
        lead: the first ``lead`` episodes choose by :data:`GREEDY`.
        record, arrays, timing: the :class:`~doppler_lab.schedule.ScheduleBatch`.
        selected, est: each episode's selected node and its earliest starts.
        out: ``(devices, partial, span)``: written: the device ``devices[:, t]``, the schedule's
            makespan before the step ``partial[:, t]`` (times ``scale``) and after it ``span``.
        scale: the graph's time scale.
    """
    devices, partial, span = out
    finish = arrays[2]
    ndev = logits.shape[1]
    for k in range(selected.shape[0]):
        if kind == SAMPLE and k >= lead:
            d = _draw(weights[k], 0, ndev, u[k])
        else:
            d = _argmax(logits[k], 0, ndev)
        v = selected[k]
        devices[k, t] = d
        partial[k, t] = span[k]
        batch_assign(record, arrays, timing, k, v, d, est[k])
        span[k] = max(span[k], finish[k, v] * scale)

"""Compiled simulator cores (numba). Arrays in, arrays out; no Python objects.

Kernels take a device array and four records, each passed as a plain tuple in the field order of
its named tuple below and named again on entry (numba types a plain tuple of arrays in C; a named
tuple goes through Python's ``typeof`` on every call, a few microseconds). The graph and cost
records are built once per :class:`~doppler_lab.timing.sim.Simulator`:

- :class:`GraphArrays`: nodes 0..n-1; ``is_input`` nodes are skipped (resident everywhere at time
  0); ``indeg`` counts only non-input predecessors; out-edges of a node are the CSR slots
  ``succ_ptr[u]..succ_ptr[u+1]`` in edge-id order;
- :class:`CostArrays`: compute time of v on d is ``comp[v, d] * comp_noise[v]`` (``comp`` may
  have one column when every device is the same: then column 0 serves all; the device count
  comes from ``lat``); per-slot arrays (``slot_fixed``, ``slot_bytes``, ``slot_noise``) are
  indexed by slot, and the time of slot k from device a to b != a is
  :func:`doppler_lab.hardware.rules.transfer_time` of ``(slot_fixed[k], lat[a, b], slot_bytes[k],
  inv_bw[a, b])`` times ``slot_noise[k]``;
- :class:`RunOptions`: noise factors and dispatch switches of one run (the batch forms take one
  row of noise and priorities per placement, or one row for all);
- :class:`TraceBuffers`: what a run records; the paper kernel records nothing when they are empty.
Each kernel fills ``start``/``end`` and transfer records and returns (makespan, n_transfers).

The memory sweep (:func:`memory_sweep`) takes three records the same way: :class:`SweepGraph`
(built once per :class:`~doppler_lab.timing.sim.footprint.MemoryModel`), and a run's
:class:`NodeTimes` and :class:`TransferTimes`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from ...hardware.rules import reserve_route, transfer_time
from ..heaps import heap_pop, heap_push


class GraphArrays(NamedTuple):
    """The graph as the kernels read it."""

    succ_ptr: np.ndarray  # (N + 1,) CSR offsets of each node's out-edge slots
    succ_idx: np.ndarray  # (E,) consumer of each slot
    slot_src: np.ndarray  # (E,) producer of each slot
    indeg: np.ndarray  # (N,) compute (non-input) predecessors of each node
    is_input: np.ndarray  # (N,) resident inputs: never timed
    level_order: np.ndarray  # compute nodes by (depth, id), for bsp
    level_ptr: np.ndarray  # (L + 1,) offsets of each level in level_order, for bsp


class CostArrays(NamedTuple):
    """Compute and transfer costs of the graph on the cluster (raw units), and its links."""

    comp: np.ndarray  # (N, D) or (N, 1) compute time
    slot_fixed: np.ndarray  # (E,) explicit transfer cost per slot
    slot_bytes: np.ndarray  # (E,) bytes per slot
    lat: np.ndarray  # (D, D) latency
    inv_bw: np.ndarray  # (D, D) time per byte
    routes: np.ndarray  # (D, D, 2) link resources of each ordered pair (-1: none)
    n_links: int  # number of link resources


class RunOptions(NamedTuple):
    """Noise and dispatch of one run (batch forms: one row per placement, or one for all)."""

    comp_noise: np.ndarray  # (N,) duration factor per node
    slot_noise: np.ndarray  # (E,) duration factor per slot
    has_noise: bool  # False: the factors are all 1 and are not read
    priority: np.ndarray  # (N,) dispatch priority (wc with use_priority)
    use_priority: bool  # wc: (priority, id) instead of (ready time, id)
    dedupe: bool  # wc: a tensor is sent once per consuming device


class TraceBuffers(NamedTuple):
    """Per-node times and per-transfer records a run fills (``E`` rows for transfers)."""

    start: np.ndarray  # (N,)
    end: np.ndarray  # (N,)
    tr_slot: np.ndarray  # (E,) int64
    tr_start: np.ndarray  # (E,)
    tr_end: np.ndarray  # (E,)
    tr_link: np.ndarray  # (E,) int64 first link resource (-1: none)


def new_buffers(n: int, e: int) -> TraceBuffers:
    """Buffers for a run of ``n`` nodes and ``e`` edges (0 and 0: a paper run records nothing)."""
    f, i = np.empty(n), np.empty(e, np.int64)
    return TraceBuffers(f, np.empty(n), i, np.empty(e), np.empty(e), np.empty(e, np.int64))


@njit(inline="always")
def _named(graph, costs, opts, out):  # pragma: no cover - compiled
    """The kernels' arguments (plain tuples) as their named records."""
    return GraphArrays(*graph), CostArrays(*costs), RunOptions(*opts), TraceBuffers(*out)


@njit(inline="always")
def _compute_time(costs, v, d):  # pragma: no cover - compiled
    """Compute time of node v on device d, before noise."""
    comp = costs.comp
    return comp[v, d if comp.shape[1] > 1 else 0]


@njit(inline="always")
def _slot_time(costs, k, a, b):  # pragma: no cover - compiled
    """Time of slot k from device a to device b != a, before noise."""
    return transfer_time(
        costs.slot_fixed[k], costs.lat[a, b], costs.slot_bytes[k], costs.inv_bw[a, b]
    )


@njit(cache=True)
def check_devices(device, is_input, num_devices, out):  # pragma: no cover - compiled
    """Copy ``device`` into ``out`` with input nodes on device 0 (never read by the kernels; keeps
    indexing in range); return the first compute node whose device is outside
    ``0..num_devices-1``, or -1."""
    for v in range(device.shape[0]):
        if is_input[v]:
            out[v] = 0
        else:
            d = device[v]
            if d < 0 or d >= num_devices:
                return v
            out[v] = d
    return -1


# --------------------------------------------------------------------------------------------
# paper semantics: an exact emulation of the released SimPy simulator's event order
# --------------------------------------------------------------------------------------------
# SimPy processes events by (time, priority, eid). Zero-delay events scheduled while processing
# instant t come after every event already due at t (larger eids) and among themselves in
# creation order, so they live in a FIFO; delayed events live in a heap keyed (time, eid).
# Event chain of the released code per edge u->v: finish[u] -> timeout(comm or 0) -> comm
# process end -> AllOf(v) check -> (last input) AllOf succeeds -> request(dev) -> granted ->
# timeout(comp) -> release(dev) + finish[v]; a release grants the next queued request (FIFO).

_FINISH = 0
_TIMEOUT = 1
_PEND = 2
_COND = 3
_REQ = 4
_RELEASE = 5
_COMPT = 6


@njit(inline="always")
def _event_queues(n, e, ndev):  # pragma: no cover - compiled
    """The paper kernel's event queues for ``n`` nodes, ``e`` slots and ``ndev`` devices: a
    ring buffer of same-instant events large enough for every event that can be pending at once
    (one per node, slot and device; a power of two, with its index mask) and a timed heap
    (times, sequence numbers, codes)."""
    cap = 16
    while cap < n + e + ndev + 8:
        cap *= 2
    hcap = n + e + 1
    fifo = np.empty(cap, np.int64)
    return fifo, cap - 1, np.empty(hcap), np.empty(hcap, np.int64), np.empty(hcap, np.int64)


@njit(inline="always")
def _node_rows(graph, costs, dev, opts):  # pragma: no cover - compiled
    """The paper kernel's per-node state packed in one row (device, inputs still pending, next in
    the device queue, first out-slot: one cache line per node instead of one per array;
    ``(N + 1, 4)``, the last row closing the slots) and each node's duration ``(N,)``."""
    n = graph.indeg.shape[0]
    ni = np.empty((n + 1, 4), np.int32)
    dur = np.empty(n)
    for v in range(n):
        ni[v, 0] = dev[v]
        ni[v, 1] = graph.indeg[v]
        ni[v, 2] = -1
        ni[v, 3] = graph.succ_ptr[v]
        c = _compute_time(costs, v, dev[v])
        dur[v] = c * opts.comp_noise[v] if opts.has_noise else c
    ni[n, 3] = graph.succ_ptr[n]
    return ni, dur


@njit(cache=True)
def paper_kernel(graph, costs, dev, opts, out):  # pragma: no cover - compiled
    graph, costs, opts, out = _named(graph, costs, opts, out)
    succ_idx, indeg, is_input = graph.succ_idx, graph.indeg, graph.is_input
    slot_noise, has_noise = opts.slot_noise, opts.has_noise
    start, end = out.start, out.end
    tr_slot, tr_start, tr_end = out.tr_slot, out.tr_start, out.tr_end
    record = start.shape[0] > 0
    n = indeg.shape[0]
    ndev = costs.lat.shape[0]
    fifo, mask, ht, hs, hc = _event_queues(n, succ_idx.shape[0], ndev)
    ni, dur = _node_rows(graph, costs, dev, opts)
    fh = 0
    ft = 0
    hn = 0
    busy = np.zeros(ndev, np.bool_)
    qhead = np.full(ndev, -1, np.int32)
    qtail = np.full(ndev, -1, np.int32)
    ntr = 0
    eid = 0
    now = 0.0
    makespan = 0.0
    if record:
        for v in range(n):
            start[v] = np.nan
            end[v] = np.nan
    for v in range(n):
        if not is_input[v] and indeg[v] == 0:
            fifo[ft & mask] = v * 8 + _COND
            ft += 1
            eid += 1
    while True:
        if hn > 0 and ht[0] == now:
            code = hc[0]
            hn = heap_pop(ht, hs, hc, 0, hn)
        elif fh < ft:
            code = fifo[fh & mask]
            fh += 1
            if fh == ft:  # empty: restart at the front, which stays in cache
                fh = 0
                ft = 0
        elif hn > 0:
            now = ht[0]
            continue
        else:
            break
        kind = code & 7
        x = code >> 3
        if kind == _FINISH:
            a = ni[x, 0]
            for k in range(ni[x, 3], ni[x + 1, 3]):
                b = ni[succ_idx[k], 0]
                c = 0.0
                if a != b:
                    c = _slot_time(costs, k, a, b)
                    if has_noise:
                        c *= slot_noise[k]
                    if record:
                        tr_slot[ntr] = k
                        tr_start[ntr] = now
                        tr_end[ntr] = now + c
                    ntr += 1
                eid += 1
                t = now + c
                if t == now:
                    fifo[ft & mask] = k * 8 + _TIMEOUT
                    ft += 1
                else:
                    hn = heap_push(ht, hs, hc, 0, hn, t, eid, k * 8 + _TIMEOUT)
        elif kind == _TIMEOUT:
            eid += 1
            fifo[ft & mask] = x * 8 + _PEND
            ft += 1
        elif kind == _PEND:
            v = succ_idx[x]
            ni[v, 1] -= 1
            if ni[v, 1] == 0:
                eid += 1
                fifo[ft & mask] = v * 8 + _COND
                ft += 1
        elif kind == _COND or kind == _RELEASE:
            if kind == _COND:
                d = ni[x, 0]
                if qtail[d] < 0:
                    qhead[d] = x
                else:
                    ni[qtail[d], 2] = x
                qtail[d] = x
            else:
                d = x
            if not busy[d] and qhead[d] >= 0:  # the resource grants the head of its queue
                w = qhead[d]
                qhead[d] = ni[w, 2]
                if qhead[d] < 0:
                    qtail[d] = -1
                busy[d] = True
                eid += 1
                fifo[ft & mask] = w * 8 + _REQ
                ft += 1
        elif kind == _REQ:
            if record:
                start[x] = now
            eid += 1
            t = now + dur[x]
            if t == now:
                fifo[ft & mask] = x * 8 + _COMPT
                ft += 1
            else:
                hn = heap_push(ht, hs, hc, 0, hn, t, eid, x * 8 + _COMPT)
        else:  # _COMPT
            if record:
                end[x] = now
            if now > makespan:
                makespan = now
            d = ni[x, 0]
            busy[d] = False
            eid += 2
            fifo[ft & mask] = d * 8 + _RELEASE
            fifo[(ft + 1) & mask] = x * 8 + _FINISH
            ft += 2
    return makespan, ntr


# --------------------------------------------------------------------------------------------
# wc semantics: work-conserving with link contention, latency, noise, FIFO or priority dispatch
# --------------------------------------------------------------------------------------------
# At each instant all completions and arrivals are applied first, then every idle device starts
# its best ready op: the smallest (ready time, node id) (FIFO) or (priority, node id). A finished
# tensor is sent once to each other device that consumes it; a transfer occupies every link
# resource on its route for its whole duration, and transfers sharing a resource run one after
# another in the order they were issued (FIFO serialisation).
# With a host (``has_host``, doppler_lab.hardware.host): one host thread launches every op and
# issues every copy, one at a time in the order the kernel reaches them (an instant's copies
# before its launches; launches in device order): an op starts on its device once its launch
# ends, a copy takes its link once issued; an op that starts while more than ``capacity``
# devices are busy (itself included) is slowed by busy / capacity. With ``cores`` > 0, the busy
# devices and the busy copy lanes (links) share that many cores (CPU workers: each is a thread):
# while ``r`` of them run, with ``r`` above ``cores``, each running op progresses at ``cores / r``
# of its speed, so it is charged the ``1 - cores / r`` of each unit of time it did not work; an
# op's end is put off by what it was charged while it ran, again by what was charged meanwhile,
# until that is negligible (processor sharing, exact while the busy set stays). A copy's thread
# shares them too, judged once at its issue: with ``m`` threads wanting a core then (the busy
# devices, the issuing device if it has ops ready, and the copy), above ``cores``, the copy takes
# ``m / cores`` times its time. At zero costs and no
# capacity every time is the same as without the host, to the bit.


class HostCosts(NamedTuple):
    """The host resource of a ``wc`` run (:func:`wc_host_kernel`), raw units."""

    launch: float  # host time per op launch (the caller takes it off comp)
    copy: float  # host time per copy issued
    capacity: float  # devices computing at full speed at once (0: all)
    cores: float  # cores shared by the busy devices and copy lanes (0: not modelled)


#: the host of :func:`wc_kernel`: none (its branches are compiled away)
_NO_HOST = (False, 0.0, 0.0, 0.0, 0.0)


@njit(cache=True)
def wc_kernel(graph, costs, dev, opts, out):  # pragma: no cover - compiled
    return _wc_run(graph, costs, dev, opts, out, _NO_HOST)


@njit(cache=True)
def wc_host_kernel(graph, costs, dev, opts, out, host):  # pragma: no cover - compiled
    """:func:`wc_kernel` with the host resource ``host`` (:class:`HostCosts` as a plain tuple)."""
    return _wc_run(graph, costs, dev, opts, out, (True, host[0], host[1], host[2], host[3]))


@njit(inline="always")
def _wc_ready_heaps(graph, dev, opts, ndev):  # pragma: no cover - compiled
    """The per-device ready heaps of a ``wc`` run, holding the ops with no compute inputs: keys,
    ids and payloads in one array each, a segment per device sized by the ops placed there
    (``base``), and each heap's length ``rn``; returns ``(rk1, rk2, rp, base, rn)``."""
    n = graph.indeg.shape[0]
    count = np.zeros(ndev + 1, np.int64)
    for v in range(n):
        if not graph.is_input[v]:
            count[dev[v] + 1] += 1
    base = np.cumsum(count)
    rk1 = np.empty(n + 1)
    rk2 = np.empty(n + 1, np.int64)
    rp = np.empty(n + 1, np.int64)
    rn = np.zeros(ndev, np.int64)
    for v in range(n):
        if not graph.is_input[v] and graph.indeg[v] == 0:
            d = dev[v]
            key = opts.priority[v] if opts.use_priority else 0.0
            rn[d] = heap_push(rk1, rk2, rp, base[d], rn[d], key, v, v)
    return rk1, rk2, rp, base, rn


@njit(inline="always")
def _latest_end(end, is_input):  # pragma: no cover - compiled
    """The makespan: the latest end of a compute op."""
    makespan = 0.0
    for v in range(end.shape[0]):
        if not is_input[v] and end[v] > makespan:
            makespan = end[v]
    return makespan


@njit(inline="always")
def _charge_shared_cores(busy, link_free, lane_busy, charged, t0, t1, cores):  # pragma: no cover
    """Charge each busy device for ``[t0, t1)`` on ``cores`` shared cores: the busy devices and
    the copy lanes busy then (lane ``l`` until ``link_free[l]``) each want a core; with ``r``
    wanting more than ``cores``, a running op is charged ``1 - cores / r`` per unit of time (the
    work it did not do)."""
    dt = t1 - t0
    if dt <= 0.0:
        return
    m = 0
    for j in range(busy.shape[0]):
        if busy[j]:
            m += 1
    if m == 0:
        return
    nl = 0
    for k in range(link_free.shape[0]):  # the lanes busy in [t0, t1), by how long (sorted)
        b = link_free[k] - t0
        if b > 0.0:
            b = min(b, dt)
            i = nl
            while i > 0 and lane_busy[i - 1] > b:
                lane_busy[i] = lane_busy[i - 1]
                i -= 1
            lane_busy[i] = b
            nl += 1
    charge = 0.0
    prev = 0.0
    for k in range(nl + 1):  # [prev, lane_busy[k]) has nl - k lanes busy
        upto = lane_busy[k] if k < nl else dt
        r = m + nl - k
        if r > cores:
            charge += (upto - prev) * (1.0 - cores / r)
        prev = upto
    if charge > 0.0:
        for j in range(busy.shape[0]):
            if busy[j]:
                charged[j] += charge


@njit(inline="always")
def _wc_run(graph, costs, dev, opts, out, host):  # pragma: no cover - compiled
    """The ``wc`` kernel; ``host`` = (binds, launch, copy issue, capacity, cores), a constant
    ``(False, ...)`` in :func:`wc_kernel` so that the host's branches are compiled away."""
    graph, costs, opts, out = _named(graph, costs, opts, out)
    succ_ptr, succ_idx, slot_src = graph.succ_ptr, graph.succ_idx, graph.slot_src
    indeg, is_input = graph.indeg, graph.is_input
    routes = costs.routes
    comp_noise, slot_noise, has_noise = opts.comp_noise, opts.slot_noise, opts.has_noise
    priority, use_priority, dedupe = opts.priority, opts.use_priority, opts.dedupe
    start, end, tr_slot, tr_start, tr_end, tr_link = out
    n = indeg.shape[0]
    ndev = costs.lat.shape[0]
    e = succ_idx.shape[0]
    # event heap: (time, seq) -> code (node*2 for finish, transfer*2+1 for arrival)
    hcap = n + e + 1
    ht = np.empty(hcap)
    hs = np.empty(hcap, np.int64)
    hc = np.empty(hcap, np.int64)
    hn = 0
    seq = 0
    rk1, rk2, rp, base, rn = _wc_ready_heaps(graph, dev, opts, ndev)
    busy = np.zeros(ndev, np.bool_)
    arrived = np.zeros(n, np.int64)
    link_free = np.zeros(max(costs.n_links, 1))
    sent_stamp = np.full(ndev, -1, np.int64)
    ntr = 0
    start[:] = np.nan
    end[:] = np.nan
    has_host, host_launch, host_copy, capacity, cores = host
    lane_busy = np.empty(link_free.shape[0])  # scratch: how long each busy lane stays busy
    host_free = 0.0  # the host thread is free from then on
    nbusy = 0
    charged = np.zeros(ndev)  # what the shared cores added to each device's running op
    now = 0.0
    while True:
        # dispatch idle devices
        for d in range(ndev):
            if not busy[d] and rn[d] > 0:
                v = rp[base[d]]
                rn[d] = heap_pop(rk1, rk2, rp, base[d], rn[d])
                busy[d] = True
                seq += 1
                dur = _compute_time(costs, v, d)
                if has_noise:
                    dur *= comp_noise[v]
                if has_host:  # the launch takes the host first; shared cores slow the op
                    t0 = max(now, host_free) + host_launch
                    host_free = t0
                    nbusy += 1
                    if capacity > 0 and nbusy > capacity:
                        dur *= nbusy / capacity
                    charged[d] = 0.0
                    start[v] = t0
                    hn = heap_push(ht, hs, hc, 0, hn, t0 + dur, seq, v * 2)
                else:
                    start[v] = now
                    hn = heap_push(ht, hs, hc, 0, hn, now + dur, seq, v * 2)
        if hn == 0:
            break
        if has_host and cores > 0.0:  # charge what the shared cores took from running ops
            _charge_shared_cores(busy, link_free, lane_busy, charged, now, ht[0], cores)
        now = ht[0]
        while hn > 0 and ht[0] == now:
            code = hc[0]
            hn = heap_pop(ht, hs, hc, 0, hn)
            x = code >> 1
            if code & 1 == 0:  # op x finished
                a = dev[x]
                # put off by what the shared cores took meanwhile (what is charged during the
                # delay puts it off again; a charge below a millionth of the op's time is dropped)
                if has_host and charged[a] > 1e-6 * (now - start[x]):
                    seq += 1
                    hn = heap_push(ht, hs, hc, 0, hn, now + charged[a], seq, code)
                    charged[a] = 0.0
                    continue
                end[x] = now
                busy[a] = False
                if has_host:
                    nbusy -= 1
                for k in range(succ_ptr[x], succ_ptr[x + 1]):
                    w = succ_idx[k]
                    b = dev[w]
                    if b == a:
                        arrived[w] += 1
                        if arrived[w] == indeg[w]:
                            key = priority[w] if use_priority else now
                            rn[b] = heap_push(rk1, rk2, rp, base[b], rn[b], key, w, w)
                        continue
                    if dedupe:
                        if sent_stamp[b] == x:
                            continue  # this copy is already on its way; its arrival serves w
                        sent_stamp[b] = x
                    dur = _slot_time(costs, k, a, b)
                    if has_noise:
                        dur *= slot_noise[k]
                    r1 = routes[a, b, 0]
                    ready = now
                    if has_host:  # the host issues the copy before it takes its link
                        ready = max(now, host_free) + host_copy
                        host_free = ready
                        if cores > 0.0:  # the copy's thread shares the cores too (at its issue)
                            m = 1
                            for j in range(ndev):
                                if busy[j] or (j == a and rn[j] > 0):
                                    m += 1
                            if m > cores:
                                dur *= m / cores
                    s, f = reserve_route(link_free, r1, routes[a, b, 1], ready, dur)
                    tr_slot[ntr] = k
                    tr_start[ntr] = s
                    tr_end[ntr] = f
                    tr_link[ntr] = r1
                    seq += 1
                    hn = heap_push(ht, hs, hc, 0, hn, f, seq, ntr * 2 + 1)
                    ntr += 1
            else:  # transfer x arrived
                k = tr_slot[x]
                b = dev[succ_idx[k]]
                u = slot_src[k]
                if dedupe:
                    for j in range(succ_ptr[u], succ_ptr[u + 1]):
                        w = succ_idx[j]
                        if dev[w] == b:
                            arrived[w] += 1
                            if arrived[w] == indeg[w]:
                                key = priority[w] if use_priority else now
                                rn[b] = heap_push(rk1, rk2, rp, base[b], rn[b], key, w, w)
                else:
                    w = succ_idx[k]
                    arrived[w] += 1
                    if arrived[w] == indeg[w]:
                        key = priority[w] if use_priority else now
                        rn[b] = heap_push(rk1, rk2, rp, base[b], rn[b], key, w, w)
    return _latest_end(end, is_input), ntr


# --------------------------------------------------------------------------------------------
# bsp semantics: level-synchronous with barriers
# --------------------------------------------------------------------------------------------
# Level l = longest chain of compute nodes ending at v. Each level: every device runs its ops of
# the level back to back (node-id order); barrier; the level's outputs are sent (once per
# consumer device, FIFO on link resources); barrier; next level.


@njit(cache=True)
def bsp_kernel(graph, costs, dev, opts, out):  # pragma: no cover - compiled
    graph, costs, opts, out = _named(graph, costs, opts, out)
    succ_ptr, succ_idx = graph.succ_ptr, graph.succ_idx
    level_order, level_ptr = graph.level_order, graph.level_ptr
    routes = costs.routes
    comp_noise, slot_noise = opts.comp_noise, opts.slot_noise
    start, end, tr_slot, tr_start, tr_end, tr_link = out
    n = dev.shape[0]
    ndev = costs.lat.shape[0]
    for v in range(n):
        start[v] = np.nan
        end[v] = np.nan
    dev_time = np.zeros(ndev)
    link_free = np.zeros(max(costs.n_links, 1))
    sent_stamp = np.full(ndev, -1, np.int64)
    ntr = 0
    level_start = 0.0
    for lvl in range(level_ptr.shape[0] - 1):
        for d in range(ndev):
            dev_time[d] = level_start
        for i in range(level_ptr[lvl], level_ptr[lvl + 1]):
            v = level_order[i]
            d = dev[v]
            start[v] = dev_time[d]
            dev_time[d] += _compute_time(costs, v, d) * comp_noise[v]
            end[v] = dev_time[d]
        barrier = level_start
        for d in range(ndev):
            if dev_time[d] > barrier:
                barrier = dev_time[d]
        for r in range(link_free.shape[0]):
            link_free[r] = barrier
        comm_end = barrier
        for i in range(level_ptr[lvl], level_ptr[lvl + 1]):
            u = level_order[i]
            a = dev[u]
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                b = dev[succ_idx[k]]
                if b == a or sent_stamp[b] == u:
                    continue
                sent_stamp[b] = u
                dur = _slot_time(costs, k, a, b)
                dur *= slot_noise[k]
                r1 = routes[a, b, 0]
                s, f = reserve_route(link_free, r1, routes[a, b, 1], barrier, dur)
                tr_slot[ntr] = k
                tr_start[ntr] = s
                tr_end[ntr] = f
                tr_link[ntr] = r1
                ntr += 1
                if f > comm_end:
                    comm_end = f
        level_start = comm_end
    makespan = 0.0
    for v in range(n):
        if end[v] == end[v] and end[v] > makespan:
            makespan = end[v]
    return makespan, ntr


# --------------------------------------------------------------------------------------------
# batch forms: many placements of one graph, makespans only, in parallel
# --------------------------------------------------------------------------------------------


@njit(inline="always")
def _new_buffers(n, e):  # pragma: no cover - compiled
    """:func:`new_buffers` in compiled code, as a plain tuple."""
    return (
        np.empty(n),
        np.empty(n),
        np.empty(e, np.int64),
        np.empty(e),
        np.empty(e),
        np.empty(e, np.int64),
    )


@njit(inline="always")
def _batch_row(opts, i):  # pragma: no cover - compiled
    """The options of run ``i`` of a batch (rows repeat when there are fewer), as a plain tuple."""
    cn, sn, pr = opts.comp_noise, opts.slot_noise, opts.priority
    return (
        cn[i % cn.shape[0]],
        sn[i % sn.shape[0]],
        opts.has_noise,
        pr[i % pr.shape[0]],
        opts.use_priority,
        opts.dedupe,
    )


@njit(cache=True, parallel=True)
def paper_batch(graph, costs, devs, opts, nchunks):  # pragma: no cover - compiled
    opts = RunOptions(*opts)
    k = devs.shape[0]
    result = np.empty(k)
    size = (k + nchunks - 1) // nchunks
    for c in prange(nchunks):
        none_f = np.empty(0)
        none_i = np.empty(0, np.int64)
        out = (none_f, none_f, none_i, none_f, none_f, none_i)
        for i in range(c * size, min(k, (c + 1) * size)):
            m, _ = paper_kernel(graph, costs, devs[i], _batch_row(opts, i), out)
            result[i] = m
    return result


@njit(cache=True, parallel=True)
def wc_batch(graph, costs, devs, opts):  # pragma: no cover - compiled
    return _wc_batch_run(graph, costs, devs, opts, _NO_HOST)


@njit(cache=True, parallel=True)
def wc_host_batch(graph, costs, devs, opts, host):  # pragma: no cover - compiled
    """:func:`wc_batch` with the host resource ``host`` (:class:`HostCosts`, a plain tuple)."""
    return _wc_batch_run(graph, costs, devs, opts, (True, host[0], host[1], host[2], host[3]))


@njit(inline="always")
def _wc_batch_run(graph, costs, devs, opts, host):  # pragma: no cover - compiled
    """The ``wc`` batch; ``host`` as in :func:`_wc_run`."""
    opts = RunOptions(*opts)
    k = devs.shape[0]
    n = devs.shape[1]
    e = GraphArrays(*graph).succ_idx.shape[0]
    result = np.empty(k)
    for i in prange(k):
        out = _new_buffers(n, e)
        m, _ = _wc_run(graph, costs, devs[i], _batch_row(opts, i), out, host)
        result[i] = m
    return result


@njit(cache=True)
def bsp_batch(graph, costs, devs, opts):  # pragma: no cover - compiled
    opts = RunOptions(*opts)
    k = devs.shape[0]
    result = np.empty(k)
    out = _new_buffers(devs.shape[1], GraphArrays(*graph).succ_idx.shape[0])
    for i in range(k):
        m, _ = bsp_kernel(graph, costs, devs[i], _batch_row(opts, i), out)
        result[i] = m
    return result


# --------------------------------------------------------------------------------------------
# memory: bytes resident per device over a finished run (any semantics, or a measured trace)
# --------------------------------------------------------------------------------------------
# Intervals (see doppler_lab.timing.sim.footprint for the model): a stored input is resident on
# each device that reads it for the whole run (``base``); an op's output from its start until
# its last consumer on its device ends and its last transfer out ends (never freed when nothing
# consumes it: a graph output); a received copy from its first transfer's start until its last
# consumer there ends. Events are ordered by (time, rank): a transfer's start comes first at its
# instant, then op events by each device's execution order (op k's start, op k's end, op k+1's
# start, ...: an op's output meets its inputs even when it takes no time), a transfer's end last.


class SweepGraph(NamedTuple):
    """The graph as the memory sweep reads it."""

    topo_pos: np.ndarray  # (N,) position in a topological order (ties between equal times)
    nbytes: np.ndarray  # (N,) output size of each node
    succ_ptr: np.ndarray  # (N + 1,) CSR offsets of each node's successors
    succ_idx: np.ndarray  # consumer of each out-edge


class NodeTimes(NamedTuple):
    """Where and when each node of a run ran."""

    dev: np.ndarray  # (N,) int64 device (inputs: -1)
    start: np.ndarray  # (N,) start (NaN: never ran)
    end: np.ndarray  # (N,) end


class TransferTimes(NamedTuple):
    """A run's transfers."""

    src: np.ndarray  # (M,) int64 source node
    dst_dev: np.ndarray  # (M,) int64 destination device
    start: np.ndarray  # (M,) start
    end: np.ndarray  # (M,) end


@njit(inline="always")
def _key_less(t1, r1, t2, r2):  # pragma: no cover - compiled
    return t1 < t2 or (t1 == t2 and r1 < r2)


@njit(inline="always")
def _execution_rank(start, end, topo_pos):  # pragma: no cover - compiled
    """Each compute node's place in its device's execution order ``(N,)``: by start, end and
    topological position (a global order serves every device); 0 for nodes that never ran."""
    n = start.shape[0]
    ran = 0
    for v in range(n):
        if start[v] == start[v]:
            ran += 1
    comp = np.empty(ran, np.int64)
    i = 0
    for v in range(n):
        if start[v] == start[v]:
            comp[i] = v
            i += 1
    comp = comp[np.argsort(topo_pos[comp], kind="mergesort")]
    comp = comp[np.argsort(end[comp], kind="mergesort")]
    comp = comp[np.argsort(start[comp], kind="mergesort")]
    rank = np.zeros(n, np.int64)
    for i in range(ran):
        rank[comp[i]] = i
    return rank


@njit(inline="always")
def _transfers_by_source(tr_src, n):  # pragma: no cover - compiled
    """The transfers grouped by source node (CSR over ``n`` nodes): ``(tptr, torder)``, the
    transfers of node u at ``torder[tptr[u]:tptr[u + 1]]`` in their recorded order."""
    nt = tr_src.shape[0]
    tptr = np.zeros(n + 1, np.int64)
    for k in range(nt):
        tptr[tr_src[k] + 1] += 1
    for v in range(n):
        tptr[v + 1] += tptr[v]
    fill = tptr[:n].copy()
    torder = np.empty(nt, np.int64)
    for k in range(nt):
        u = tr_src[k]
        torder[fill[u]] = k
        fill[u] += 1
    return tptr, torder


@njit(inline="always")
def _levels(events, base):  # pragma: no cover - compiled
    """The sweep of ``events`` ``(device, time, rank, bytes)`` sorted by (device, time, rank)
    from each device's ``base``: ``(peak (D,), ev_dev, ev_time, ev_level)``, ``ev_level`` the
    bytes resident once the event is applied."""
    e_dev, e_t, e_r, e_b = events
    ne = e_dev.shape[0]
    # stable sorts, last key first
    order = np.argsort(e_r, kind="mergesort")
    order = order[np.argsort(e_t[order], kind="mergesort")]
    order = order[np.argsort(e_dev[order], kind="mergesort")]
    peak = base.copy()
    ev_dev = np.empty(ne, np.int64)
    ev_time = np.empty(ne)
    ev_level = np.empty(ne)
    level = 0.0
    last = -1
    for i in range(ne):
        k = order[i]
        d = e_dev[k]
        if d != last:
            level = base[d]
            last = d
        level += e_b[k]
        if e_b[k] > 0 and level > peak[d]:
            peak[d] = level
        ev_dev[i] = d
        ev_time[i] = e_t[k]
        ev_level[i] = level
    return peak, ev_dev, ev_time, ev_level


@njit(cache=True)
def memory_sweep(graph, times, transfers, ndev):  # pragma: no cover - compiled
    """Peak bytes per device, with the sweep's events.

    Args: ``graph`` (:class:`SweepGraph`), the run's ``times`` (:class:`NodeTimes`) and
    ``transfers`` (:class:`TransferTimes`), each a plain tuple in its fields' order, and the
    number of devices ``ndev``.

    Returns ``(peak (D,), base (D,), ev_dev, ev_time, ev_level)``: events sorted by device and
    time, ``ev_level`` the bytes resident on ``ev_dev`` once the event is applied."""
    topo_pos, nbytes, succ_ptr, succ_idx = SweepGraph(*graph)
    dev, start, end = NodeTimes(*times)
    tr_src, tr_dst_dev, tr_start, tr_end = TransferTimes(*transfers)
    n = dev.shape[0]
    nt = tr_src.shape[0]
    big = 2 * n + 4
    rank = _execution_rank(start, end, topo_pos)
    tptr, torder = _transfers_by_source(tr_src, n)
    base = np.zeros(ndev)
    cap = 2 * (n + nt) + 2
    e_dev = np.empty(cap, np.int64)
    e_t = np.empty(cap)
    e_r = np.empty(cap, np.int64)
    e_b = np.empty(cap)
    ne = 0
    stamp = np.full(ndev, -1, np.int64)
    has_free = np.zeros(ndev, np.bool_)
    free_t = np.empty(ndev)
    free_r = np.empty(ndev, np.int64)
    first_t = np.empty(ndev)
    touched = np.empty(ndev, np.int64)
    for u in range(n):
        b_u = nbytes[u]
        if b_u <= 0:
            continue
        if dev[u] < 0:  # a stored input: resident on every device that reads it
            for j in range(succ_ptr[u], succ_ptr[u + 1]):
                w = succ_idx[j]
                if start[w] == start[w] and stamp[dev[w]] != u:
                    stamp[dev[w]] = u
                    base[dev[w]] += b_u
            continue
        if start[u] != start[u]:  # never ran (a partial trace)
            continue
        a = dev[u]
        nd = 0
        stamp[a] = u
        touched[nd] = a
        nd += 1
        has_free[a] = False
        first_t[a] = np.inf
        for j in range(succ_ptr[u], succ_ptr[u + 1]):
            w = succ_idx[j]
            if start[w] != start[w]:
                continue
            d = dev[w]
            if stamp[d] != u:
                stamp[d] = u
                touched[nd] = d
                nd += 1
                has_free[d] = False
                first_t[d] = np.inf
            t, r = end[w], 3 + 2 * rank[w]
            if not has_free[d] or _key_less(free_t[d], free_r[d], t, r):
                free_t[d], free_r[d], has_free[d] = t, r, True
        # the sender's buffer waits for its last transfer out (kept in has_free[a] too)
        for i in range(tptr[u], tptr[u + 1]):
            k = torder[i]
            d = tr_dst_dev[k]
            if stamp[d] != u:
                stamp[d] = u
                touched[nd] = d
                nd += 1
                has_free[d] = False
                first_t[d] = np.inf
            if tr_start[k] < first_t[d]:
                first_t[d] = tr_start[k]
            t = tr_end[k]
            for dd in (a, d):
                if not has_free[dd] or _key_less(free_t[dd], free_r[dd], t, big):
                    free_t[dd], free_r[dd], has_free[dd] = t, big, True
        for i in range(nd):
            d = touched[i]
            if d == a:
                at, ar = start[u], 2 + 2 * rank[u]
            elif first_t[d] < np.inf:
                at, ar = first_t[d], 0
            else:
                continue  # a consumer elsewhere with no recorded transfer: nothing arrived
            if has_free[d] and not _key_less(at, ar, free_t[d], free_r[d]):
                continue  # an empty interval
            e_dev[ne], e_t[ne], e_r[ne], e_b[ne] = d, at, ar, b_u
            ne += 1
            if has_free[d]:
                e_dev[ne], e_t[ne], e_r[ne], e_b[ne] = d, free_t[d], free_r[d], -b_u
                ne += 1
    events = (e_dev[:ne], e_t[:ne], e_r[:ne], e_b[:ne])
    peak, ev_dev, ev_time, ev_level = _levels(events, base)
    return peak, base, ev_dev, ev_time, ev_level

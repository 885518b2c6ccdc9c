"""Compiled simulator cores (numba). Arrays in, arrays out; no Python objects.

Conventions shared by the kernels:
- nodes 0..n-1; ``is_input`` nodes are skipped (resident everywhere at time 0); ``indeg`` counts
  only non-input predecessors;
- out-edges of a node are the CSR slots ``succ_ptr[u]..succ_ptr[u+1]`` in edge-id order; per-slot
  arrays (``slot_fixed``, ``slot_bytes``, ``slot_noise``) are indexed by slot;
- the transfer time of slot k from device a to b != a is
  ``(slot_fixed[k] + lat[a, b] + slot_bytes[k] * inv_bw[a, b]) * slot_noise[k]``;
- compute time of v on d is ``comp[v, d] * comp_noise[v]`` (``comp`` may have one column when
  every device is the same: then column 0 serves all; the device count comes from ``lat``).
Each kernel fills ``start``/``end`` and transfer records and returns (makespan, n_transfers).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# --------------------------------------------------------------------------------------------
# binary heaps over parallel arrays, ordered by (key1, key2); ``base`` offsets a segment
# --------------------------------------------------------------------------------------------


@njit(inline="always")
def _less(a1, a2, b1, b2):
    return a1 < b1 or (a1 == b1 and a2 < b2)


@njit(inline="always")
def _hpush(k1, k2, pay, base, size, x1, x2, p):
    i = size
    while i > 0:
        par = (i - 1) >> 1
        if _less(x1, x2, k1[base + par], k2[base + par]):
            k1[base + i] = k1[base + par]
            k2[base + i] = k2[base + par]
            pay[base + i] = pay[base + par]
            i = par
        else:
            break
    k1[base + i] = x1
    k2[base + i] = x2
    pay[base + i] = p
    return size + 1


@njit(inline="always")
def _hpop(k1, k2, pay, base, size):
    """Remove the minimum (read it at ``base`` before calling); returns the new size."""
    size -= 1
    x1 = k1[base + size]
    x2 = k2[base + size]
    p = pay[base + size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        r = c + 1
        if r < size and _less(k1[base + r], k2[base + r], k1[base + c], k2[base + c]):
            c = r
        if _less(k1[base + c], k2[base + c], x1, x2):
            k1[base + i] = k1[base + c]
            k2[base + i] = k2[base + c]
            pay[base + i] = pay[base + c]
            i = c
        else:
            break
    if size > 0:
        k1[base + i] = x1
        k2[base + i] = x2
        pay[base + i] = p
    return size


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


@njit(cache=True)
def paper_kernel(
    succ_ptr,
    succ_idx,
    slot_fixed,
    slot_bytes,
    indeg,
    is_input,
    dev,
    comp,
    lat,
    inv_bw,
    comp_noise,
    slot_noise,
    has_noise,
    explicit,
    record,
    start,
    end,
    tr_slot,
    tr_start,
    tr_end,
):  # pragma: no cover - compiled
    n = indeg.shape[0]
    ndev = lat.shape[0]
    e = succ_idx.shape[0]
    # same-instant events: a ring buffer large enough for every event that can be pending at
    # once (one per node, slot and device)
    cap = 16
    while cap < n + e + ndev + 8:
        cap *= 2
    mask = cap - 1
    fifo = np.empty(cap, np.int64)
    hcap = n + e + 1
    ht = np.empty(hcap)
    hs = np.empty(hcap, np.int64)
    hc = np.empty(hcap, np.int64)
    ni = np.empty((n + 1, 4), np.int32)
    dur = np.empty(n)
    fh = 0
    ft = 0
    hn = 0
    # per-node state packed in one row (device, inputs still pending, next in the device queue,
    # first out-slot): one cache line per node instead of one per array
    for v in range(n):
        ni[v, 0] = dev[v]
        ni[v, 1] = indeg[v]
        ni[v, 2] = -1
        ni[v, 3] = succ_ptr[v]
        c = comp[v, dev[v] if comp.shape[1] > 1 else 0]
        dur[v] = c * comp_noise[v] if has_noise else c
    ni[n, 3] = succ_ptr[n]
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
            hn = _hpop(ht, hs, hc, 0, hn)
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
                    if explicit:
                        c = slot_fixed[k]
                    else:
                        c = slot_fixed[k] + lat[a, b] + slot_bytes[k] * inv_bw[a, b]
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
                    hn = _hpush(ht, hs, hc, 0, hn, t, eid, k * 8 + _TIMEOUT)
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
                hn = _hpush(ht, hs, hc, 0, hn, t, eid, x * 8 + _COMPT)
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


@njit(inline="always")
def _reserve_route(link_free, r1, r2, ready, dur):
    """Occupy link resources r1 and r2 (-1: none) for ``dur`` from the first instant both are
    free after ``ready``; returns (start, finish)."""
    s = ready
    if r1 >= 0 and link_free[r1] > s:
        s = link_free[r1]
    if r2 >= 0 and link_free[r2] > s:
        s = link_free[r2]
    f = s + dur
    if r1 >= 0:
        link_free[r1] = f
    if r2 >= 0:
        link_free[r2] = f
    return s, f


# --------------------------------------------------------------------------------------------
# wc semantics: work-conserving with link contention, latency, noise, FIFO or priority dispatch
# --------------------------------------------------------------------------------------------
# At each instant all completions and arrivals are applied first, then every idle device starts
# its best ready op: the smallest (ready time, node id) (FIFO) or (priority, node id). A finished
# tensor is sent once to each other device that consumes it; a transfer occupies every link
# resource on its route for its whole duration, and transfers sharing a resource run one after
# another in the order they were issued (FIFO serialisation).


@njit(cache=True)
def wc_kernel(
    succ_ptr,
    succ_idx,
    slot_src,
    slot_fixed,
    slot_bytes,
    indeg,
    is_input,
    dev,
    comp,
    lat,
    inv_bw,
    routes,
    n_links,
    comp_noise,
    slot_noise,
    has_noise,
    priority,
    use_priority,
    dedupe,
    start,
    end,
    tr_slot,
    tr_start,
    tr_end,
    tr_link,
):  # pragma: no cover - compiled
    n = indeg.shape[0]
    ndev = lat.shape[0]
    e = succ_idx.shape[0]
    # event heap: (time, seq) -> code (node*2 for finish, transfer*2+1 for arrival)
    hcap = n + e + 1
    ht = np.empty(hcap)
    hs = np.empty(hcap, np.int64)
    hc = np.empty(hcap, np.int64)
    hn = 0
    seq = 0
    # ready heaps per device, segments sized by the number of nodes placed there
    count = np.zeros(ndev + 1, np.int64)
    for v in range(n):
        if not is_input[v]:
            count[dev[v] + 1] += 1
    base = np.cumsum(count)
    rk1 = np.empty(n + 1)
    rk2 = np.empty(n + 1, np.int64)
    rp = np.empty(n + 1, np.int64)
    rn = np.zeros(ndev, np.int64)
    busy = np.zeros(ndev, np.bool_)
    arrived = np.zeros(n, np.int64)
    link_free = np.zeros(max(n_links, 1))
    sent_stamp = np.full(ndev, -1, np.int64)
    ntr = 0
    for v in range(n):
        start[v] = np.nan
        end[v] = np.nan
    for v in range(n):
        if not is_input[v] and indeg[v] == 0:
            d = dev[v]
            key = priority[v] if use_priority else 0.0
            rn[d] = _hpush(rk1, rk2, rp, base[d], rn[d], key, v, v)
    now = 0.0
    while True:
        # dispatch idle devices
        for d in range(ndev):
            if not busy[d] and rn[d] > 0:
                v = rp[base[d]]
                rn[d] = _hpop(rk1, rk2, rp, base[d], rn[d])
                busy[d] = True
                start[v] = now
                seq += 1
                dur = comp[v, d if comp.shape[1] > 1 else 0]
                if has_noise:
                    dur *= comp_noise[v]
                hn = _hpush(ht, hs, hc, 0, hn, now + dur, seq, v * 2)
        if hn == 0:
            break
        now = ht[0]
        while hn > 0 and ht[0] == now:
            code = hc[0]
            hn = _hpop(ht, hs, hc, 0, hn)
            x = code >> 1
            if code & 1 == 0:  # op x finished
                a = dev[x]
                end[x] = now
                busy[a] = False
                for k in range(succ_ptr[x], succ_ptr[x + 1]):
                    w = succ_idx[k]
                    b = dev[w]
                    if b == a:
                        arrived[w] += 1
                        if arrived[w] == indeg[w]:
                            key = priority[w] if use_priority else now
                            rn[b] = _hpush(rk1, rk2, rp, base[b], rn[b], key, w, w)
                        continue
                    if dedupe:
                        if sent_stamp[b] == x:
                            continue  # this copy is already on its way; its arrival serves w
                        sent_stamp[b] = x
                    dur = slot_fixed[k] + lat[a, b] + slot_bytes[k] * inv_bw[a, b]
                    if has_noise:
                        dur *= slot_noise[k]
                    r1 = routes[a, b, 0]
                    s, f = _reserve_route(link_free, r1, routes[a, b, 1], now, dur)
                    tr_slot[ntr] = k
                    tr_start[ntr] = s
                    tr_end[ntr] = f
                    tr_link[ntr] = r1
                    seq += 1
                    hn = _hpush(ht, hs, hc, 0, hn, f, seq, ntr * 2 + 1)
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
                                rn[b] = _hpush(rk1, rk2, rp, base[b], rn[b], key, w, w)
                else:
                    w = succ_idx[k]
                    arrived[w] += 1
                    if arrived[w] == indeg[w]:
                        key = priority[w] if use_priority else now
                        rn[b] = _hpush(rk1, rk2, rp, base[b], rn[b], key, w, w)
    makespan = 0.0
    for v in range(n):
        if not is_input[v] and end[v] > makespan:
            makespan = end[v]
    return makespan, ntr


# --------------------------------------------------------------------------------------------
# bsp semantics: level-synchronous with barriers
# --------------------------------------------------------------------------------------------
# Level l = longest chain of compute nodes ending at v. Each level: every device runs its ops of
# the level back to back (node-id order); barrier; the level's outputs are sent (once per
# consumer device, FIFO on link resources); barrier; next level.


@njit(cache=True)
def bsp_kernel(
    succ_ptr,
    succ_idx,
    slot_fixed,
    slot_bytes,
    level_order,
    level_ptr,
    dev,
    comp,
    lat,
    inv_bw,
    routes,
    n_links,
    comp_noise,
    slot_noise,
    start,
    end,
    tr_slot,
    tr_start,
    tr_end,
    tr_link,
):  # pragma: no cover - compiled
    n = dev.shape[0]
    ndev = lat.shape[0]
    for v in range(n):
        start[v] = np.nan
        end[v] = np.nan
    dev_time = np.zeros(ndev)
    link_free = np.zeros(max(n_links, 1))
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
            dev_time[d] += comp[v, d if comp.shape[1] > 1 else 0] * comp_noise[v]
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
                dur = (slot_fixed[k] + lat[a, b] + slot_bytes[k] * inv_bw[a, b]) * slot_noise[k]
                r1 = routes[a, b, 0]
                s, f = _reserve_route(link_free, r1, routes[a, b, 1], barrier, dur)
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


@njit(cache=True, parallel=True)
def paper_batch(
    succ_ptr,
    succ_idx,
    slot_fixed,
    slot_bytes,
    indeg,
    is_input,
    devs,
    comp,
    lat,
    inv_bw,
    comp_noise,
    slot_noise,
    has_noise,
    explicit,
    nchunks,
):  # pragma: no cover - compiled
    k = devs.shape[0]
    out = np.empty(k)
    size = (k + nchunks - 1) // nchunks
    for c in prange(nchunks):
        none_f = np.empty(0)
        none_i = np.empty(0, np.int64)
        for i in range(c * size, min(k, (c + 1) * size)):
            m, _ = paper_kernel(
                succ_ptr,
                succ_idx,
                slot_fixed,
                slot_bytes,
                indeg,
                is_input,
                devs[i],
                comp,
                lat,
                inv_bw,
                comp_noise[i % comp_noise.shape[0]],
                slot_noise[i % slot_noise.shape[0]],
                has_noise,
                explicit,
                False,
                none_f,
                none_f,
                none_i,
                none_f,
                none_f,
            )
            out[i] = m
    return out


@njit(cache=True, parallel=True)
def wc_batch(
    succ_ptr,
    succ_idx,
    slot_src,
    slot_fixed,
    slot_bytes,
    indeg,
    is_input,
    devs,
    comp,
    lat,
    inv_bw,
    routes,
    n_links,
    comp_noise,
    slot_noise,
    has_noise,
    priorities,
    use_priority,
    dedupe,
):  # pragma: no cover - compiled
    k = devs.shape[0]
    n = devs.shape[1]
    e = succ_idx.shape[0]
    out = np.empty(k)
    for i in prange(k):
        start = np.empty(n)
        end = np.empty(n)
        tr_slot = np.empty(e, np.int64)
        tr_s = np.empty(e)
        tr_e = np.empty(e)
        tr_l = np.empty(e, np.int64)
        cn = comp_noise[i % comp_noise.shape[0]]
        sn = slot_noise[i % slot_noise.shape[0]]
        pr = priorities[i % priorities.shape[0]]
        m, _ = wc_kernel(
            succ_ptr,
            succ_idx,
            slot_src,
            slot_fixed,
            slot_bytes,
            indeg,
            is_input,
            devs[i],
            comp,
            lat,
            inv_bw,
            routes,
            n_links,
            cn,
            sn,
            has_noise,
            pr,
            use_priority,
            dedupe,
            start,
            end,
            tr_slot,
            tr_s,
            tr_e,
            tr_l,
        )
        out[i] = m
    return out

"""Losing ranges from one run's cells (pure data in, pure data out; CONTRACTS §2, §4, §7).

* **Kinds**, highest priority first: `wrong-answer` (ours fails the numerics gate), `broken` (ours
  errors, crashes, times out or has no kernel), `loss` (ticket-worthy: confidently slower than ORT
  by more than the minimum effect m, after Benjamini-Hochberg across the run's timed cells), and
  `coverage` (ORT has no kernel in any dtype: ours is the only implementation; informational).
* **Groups**: host class + op + dtype + device + threads + cache + spin + the op's *modes* (its
  parameters with a fixed set of choices: kv, layout, rotary, interleaved, ragged, mask, ...).
  Ranges never cross groups.
* **Axes**: the op's other (numeric) parameters. Within a group the cells form a lattice: two cells
  are *neighbours* when they differ in exactly one axis and no cell of the lattice lies between
  them on that axis (with every other axis equal). A range is a connected set of same-kind cells
  under that relation, so it can run along several axes at once (an L or a block), but two cells
  that differ in two axes at once (e.g. another model's heads and head size) join only through a
  chain of losing neighbours.
"""

from __future__ import annotations

import math

from perfbench import ops, stats

KINDS = ("wrong-answer", "broken", "loss", "coverage")
KIND_RANK = {k: i for i, k in enumerate(KINDS)}
BROKEN = ("error", "crashed", "timeout", "no-kernel")


def mode_names(op_name: str, params: dict) -> list[str]:
    """The op's parameters that split groups: those with a fixed set of choices, or strings."""
    try:
        op = ops.get(op_name)
        modes = [p.name for p in op.params if p.choices or p.kind is str]
        return [n for n in modes if n in params]
    except Exception:  # noqa: BLE001 - an op no longer registered: strings are modes
        return [k for k, v in params.items() if isinstance(v, str)]


def group_of(cell: dict) -> dict:
    modes = mode_names(cell["op"], cell["params"])
    return {"op": cell["op"], "dtype": cell["dtype"], "device": cell["device"], "threads": int(cell["threads"]),
            "cache": cell["cache"], "spin": cell["spin"], "modes": {k: cell["params"][k] for k in modes}}


def group_key(g: dict) -> str:
    modes = " ".join(f"{k}={v}" for k, v in sorted(g["modes"].items()))
    return f"{g['op']} dtype={g['dtype']} device={g['device']} threads={g['threads']} cache={g['cache']} " \
           f"spin={g['spin']}" + (f" {modes}" if modes else "")


def axes_of(cell: dict) -> dict:
    modes = set(mode_names(cell["op"], cell["params"]))
    return {k: v for k, v in cell["params"].items() if k not in modes}


def cell_id(cell: dict) -> str:
    """A cell's identity: the case, its timing definition and the cell key (unique in a run)."""
    return (f"{cell['case_id']}@{cell['timing_hash']}@{cell['dtype']}.t{cell['threads']}.{cell['device']}."
            f"{cell['cache']}.{cell['spin']}")


def case_of(cid: str) -> str:
    return cid.split("@", 1)[0]


def _p_loss(c: dict, sigma: float, m: float, sigma_dof: float) -> float:
    """p of H0: ratio <= 1+m, with the run verdict's own standard error (stats.grouped_mean_se:
    the replicates' worker processes and sigma_b folded in, Welch-Satterthwaite dof), so a ticket
    and the cell's verdict judge one interval; from the stored summary when replicates are absent."""
    ours = (c.get("ours") or {}).get("replicates_ns") or []
    ort = (c.get("ort") or {}).get("replicates_ns") or []
    if len(ours) >= 2 and len(ours) == len(ort) and min(ours) > 0 and min(ort) > 0:
        logs = [math.log(a) - math.log(b) for a, b in zip(ours, ort)]
        g = stats.grouped_mean_se(logs, (c.get("protocol") or {}).get("process") or None, sigma, sigma_dof)
        return stats.change_test(g.mean, g.se, g.dof, 0.0, m).p_worse_m
    return stats.one_sided_p(math.log(c["ratio"]), c.get("sd_log") or 0.0, int(c["n"]), sigma, math.log1p(m),
                             sigma_dof)


def judge(cells: list[dict], sigma_for, default_sigma: float, m: float = 0.03,
          q: float = 0.05) -> tuple[dict, dict]:
    """({cell id: kind} of the cells that are ticket-worthy, {cell id: (p of H0 ratio <= 1+m, sigma_b)}). `sigma_for(cell)` gives the calibrated between-run spread of
    the cell's log ours/ORT ratio, or (spread, its degrees of freedom), or None (then `default_sigma`
    with stats.PRIOR_DOF). Only `loss` verdicts can be
    ticket-worthy; BH runs over every timed cell with a ratio (one family: the whole sweep)."""
    tested, pvals = [], []
    out: dict = {}
    for c in cells:
        ours = (c.get("ours") or {}).get("status")
        ort = (c.get("ort") or {}).get("status")
        kind = None
        if ours == "mismatch":
            kind = "wrong-answer"
        elif ours in BROKEN:
            kind = "broken"
        elif ort == "no-kernel" and not c.get("numerics_only"):
            kind = "coverage"
        elif c["verdict"] in ("win", "loss", "undecided") and c.get("ratio") and c.get("n", 0) >= 2:
            got = sigma_for(c)
            sigma, sigma_dof = got if isinstance(got, tuple) else (got, stats.PRIOR_DOF)
            if sigma is None:
                sigma, sigma_dof = default_sigma, stats.PRIOR_DOF
            p = _p_loss(c, sigma, m, sigma_dof)
            tested.append((c, sigma))
            pvals.append(p)
        if kind:
            out[cell_id(c)] = kind
    p_of = {}
    for (c, sigma), p, rej in zip(tested, pvals, stats.benjamini_hochberg(pvals, q)):
        p_of[cell_id(c)] = (p, sigma)
        if rej and c["verdict"] == "loss":
            out[cell_id(c)] = "loss"
    return out, p_of


def components(lattice: dict, selected: set) -> list[set]:
    """Connected sets of `selected` cell ids; `lattice` maps every cell id of the group to its axes
    (dict). Neighbours: equal in all axes but one, adjacent on that one among the lattice's cells."""
    parent = {c: c for c in selected}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    names = sorted({k for a in lattice.values() for k in a})
    for axis in names:
        lines: dict = {}
        for cid, a in lattice.items():
            if axis not in a:
                continue
            rest = tuple(sorted((k, str(v)) for k, v in a.items() if k != axis))
            lines.setdefault(rest, []).append((a[axis], cid))
        for line in lines.values():
            line.sort(key=lambda t: (numeric(t[0]), t[1]))
            for (_, x), (_, y) in zip(line, line[1:]):
                if x in selected and y in selected:
                    rx, ry = find(x), find(y)
                    if rx != ry:
                        parent[max(rx, ry)] = min(rx, ry)
    comps: dict = {}
    for c in selected:
        comps.setdefault(find(c), set()).add(c)
    return sorted(comps.values(), key=lambda s: (-len(s), sorted(s)))


def numeric(v):
    """A parameter value as a number for ordering (non-numbers sort last)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


def match(old: dict, new: list[set]) -> tuple[dict, dict, dict]:
    """Match new ranges to existing tickets by shared cells. `old`: ticket id -> set of cell ids
    (ticket ids grow with age). Returns (range index -> ticket id kept, range index -> ticket id it
    split from (new ticket), ticket id -> ticket id it merges into).

    Within each connected set of overlapping tickets and ranges: the oldest ticket takes the largest
    range; every other range takes the oldest ticket left that overlaps it, else becomes a new
    ticket naming the ticket it overlapped (a split); tickets left over close as merged into the
    ticket that took a range they overlapped."""
    keep: dict = {}
    split: dict = {}
    merged: dict = {}
    overlaps = {i: sorted(t for t, cells in old.items() if cells & r) for i, r in enumerate(new)}
    taken: set = set()
    # largest range first (ties: the one whose oldest overlapping ticket is oldest)
    order = sorted((i for i in overlaps if overlaps[i]), key=lambda i: (-len(new[i]), overlaps[i][0], i))
    for i in order:
        free = [t for t in overlaps[i] if t not in taken]
        if free:
            keep[i] = free[0]
            taken.add(free[0])
        else:
            split[i] = overlaps[i][0]
    for t in sorted(old):
        if t in taken:
            continue
        hits = [i for i in overlaps if t in overlaps[i]]
        if hits:
            into = [keep[i] for i in hits if i in keep]
            merged[t] = min(into) if into else split.get(hits[0])
    return keep, split, merged


def box_filter(group: dict, cells: list[dict], lattice: dict) -> list[str]:
    """`--filter` texts that select exactly the range's cases among the group's lattice (every
    case of the group known, numerics-only shapes included): one filter when the range is a box
    of the lattice, else one per line along its longest axis. The cell-key fields (dtype, threads,
    device, cache, spin) are given to `perfbench run` as flags (see reproduce)."""
    base = [f"op={group['op']}"] + [f"{k}={v}" for k, v in sorted(group["modes"].items())]
    ids = {c.get("id") or cell_id(c) for c in cells}
    axes = {cid: lattice[cid] for cid in ids}

    def terms(sub: dict) -> list[str]:
        out = []
        names = sorted({k for a in sub.values() for k in a})
        for k in names:
            vals = sorted({a[k] for a in sub.values() if k in a}, key=numeric)
            if len(vals) == 1:
                out.append(f"{k}={vals[0]}")
                continue
            lo, hi = vals[0], vals[-1]
            inside = sorted({a[k] for a in lattice.values()
                             if k in a and numeric(lo) <= numeric(a[k]) <= numeric(hi)}, key=numeric)
            out.append(f"{k}={lo}..{hi}" if inside == vals else f"{k}={','.join(str(v) for v in vals)}")
        return out

    def selects(sub: dict) -> set:
        chosen = {k: {a[k] for a in sub.values() if k in a} for a in sub.values() for k in a}
        return {cid for cid, a in lattice.items() if all(a.get(k) in v for k, v in chosen.items())
                and set(a) == set(chosen)}

    if selects(axes) == ids:
        return [" ".join(base + terms(axes))]
    names = sorted({k for a in axes.values() for k in a})
    longest = max(names, key=lambda k: len({a[k] for a in axes.values()}))
    lines: dict = {}
    for cid, a in axes.items():
        lines.setdefault(tuple(sorted((k, str(v)) for k, v in a.items() if k != longest)), {})[cid] = a
    return [" ".join(base + terms(sub)) for _, sub in sorted(lines.items())]


def reproduce(suite: str, group: dict, filters: list[str]) -> str:
    """The command that measures the range again: the cell key as flags (they override the
    suite's lists, so a range measured with `--threads 2` is reproduced even if the suite's
    threads are [1, 4]) and the filters for its cases."""
    import shlex

    flags = (f"--threads {group['threads']} --dtype {group['dtype']} --cache {group['cache']} "
             f"--spin {group['spin']} --device {group['device']}")
    return f"perfbench run --suite {shlex.quote(suite)} {flags} " + " ".join(f"--filter {shlex.quote(f)}"
                                                                              for f in filters)

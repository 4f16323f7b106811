"""In-place elementwise ops: an output written over the operand it consumes last (TPU-MLIR's
``insert_inplace_local_mem``, shared/reference s5).

TPU-MLIR's LMEM allocator lets the output of an Add, Sub, Mul, Div, Min or Max take the block of an operand
whose buffer dies in the op's timestep, when nothing else reads that operand and it is at least as large.
Groups it compiles rely on it: retinanet's FPN top-down Add and resnet50's residual Add on BM1688 (zoo,
issue 37) fit 128 KiB only with the Add's output over an input; built without it they need 138,496 and
145,088 bytes in one row.

lgopt uses the rule only to read a grouping a compiler gives with its slice counts
(:func:`lgopt.group.build.allocate_thorough`, when nothing packs without it), so its own searches never count on
a sharing TPU-MLIR might not make.  A pair shares one offset; the verifier (:mod:`lgopt.check.verify`) accepts
two buffers overlapping in LMEM only when they form such a pair by its own reading of the rule
(docs/plan-format.md "In-place").
"""

from __future__ import annotations

from dataclasses import replace

from lgopt.model.network import Network
from lgopt.model.plan import Buffer, GroupPlan

INPLACE_TYPES = frozenset({"Add", "Sub", "Mul", "Div", "Min", "Max"})


def inplace_pairs(net: Network, g: GroupPlan) -> dict[int, int]:
    """Output buffer id -> the operand buffer id it may share, one operand per output (the first eligible).

    Eligible: an in-place op type; the operand is read by this op alone and not stored by the group; both are
    activations of the same dtype and the same window in every slice (so element i of the output is element
    i of the operand); neither is resident; the operand's buffer ends in the op's row and the output's
    starts there, and they share no other row.
    """
    T = len(g.rows)
    acts = {b.name: b for b in g.buffers if b.kind == "activation" and not b.resident}
    consumers = net.consumers
    out: dict[int, int] = {}
    chain_rows: dict[int, set[int]] = {}  # a chain's last buffer -> the rows its buffers hold
    for r, row in enumerate(g.rows):
        for name in row.ops:
            op = net.op(name)
            if op.type not in INPLACE_TYPES or len(op.outputs) != 1 or op.outputs[0] not in acts:
                continue
            ob = acts[op.outputs[0]]
            for t in dict.fromkeys(op.inputs):
                ib = acts.get(t)
                if (ib is None or t in g.stores or len(consumers.get(t, ())) != 1 or ib.size < ob.size
                        or net.tensor(t).dtype != net.tensor(op.outputs[0]).dtype
                        or g.windows.get(t) != g.windows.get(op.outputs[0])
                        or ib.end != r or ob.start != r):
                    continue
                held = chain_rows.pop(ib.id, ib.rows(T))
                if held & ob.rows(T) != {r}:  # the chain, one buffer, would outlive an iteration
                    continue
                out[ob.id] = ib.id
                chain_rows[ob.id] = held | ob.rows(T)
                break
    return out


def _roots(pairs: dict[int, int]) -> dict[int, int]:
    """Each buffer of a chain (out -> operand -> ...) mapped to the chain's first operand."""
    def root(i: int) -> int:
        while i in pairs:
            i = pairs[i]
        return i
    return {i: root(i) for i in pairs}


def merged(g: GroupPlan, pairs: dict[int, int]) -> GroupPlan:
    """``g`` with every in-place chain one buffer: from the first operand's start to the last output's end,
    as large as the largest of them (the operand, by the rule).  Packing it packs the pairs at one offset."""
    roots = _roots(pairs)
    operands = set(pairs.values())
    by_id = {b.id: b for b in g.buffers}
    chains: dict[int, list[Buffer]] = {}
    for i, rt in roots.items():
        chains.setdefault(rt, []).append(by_id[i])
    keep = []
    for b in g.buffers:
        if b.id in roots:
            continue
        if b.id in chains:
            last = next(x for x in chains[b.id] if x.id not in operands)  # the output no op writes over
            b = replace(b, end=last.end, size=max([b.size] + [x.size for x in chains[b.id]]))
        keep.append(b)
    return replace(g, buffers=tuple(keep))


def unmerged(offsets: dict[int, int], pairs: dict[int, int]) -> dict[int, int]:
    """Offsets of a :func:`merged` table for every buffer of the original one: a pair shares its operand's."""
    roots = _roots(pairs)
    return {**offsets, **{i: offsets[rt] for i, rt in roots.items()}}


def paired(pairs: dict[int, int], a: int, b: int) -> bool:
    """Whether buffers ``a`` and ``b`` are an in-place pair of ``pairs`` (:func:`inplace_pairs`), either way."""
    return pairs.get(a) == b or pairs.get(b) == a

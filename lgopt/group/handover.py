"""Tensors handed from one group to the next in LMEM, with no store and reload through GMEM.

Two groups that are consecutive in the order, ``A`` ending with op ``b-1`` and
``B`` starting with op ``b``, normally meet in GMEM: ``A`` stores what ``b``
reads and ``B`` loads it back.  When that tensor fits, it can instead stay in
LMEM.  Merging ``A`` and ``B`` would do the same, but only when one slicing
suits both; the hand-over is what lets an H-sliced head (large activations)
feed an unsliced tail (large weights) without the round trip.

The rules, chosen so that each group can still be scheduled and packed on its
own (the decomposed optimiser evaluates intervals independently):

* what is handed over at boundary ``b`` is fixed by the network: the outputs
  of op ``b-1`` that op ``b`` reads (:func:`handover`);
* it is held whole (every batch and row) in a resident buffer in both groups:
  the producer writes each slice's rows into it, the consumer reads any window
  of it (a strided view, as the hardware's LMEM addressing allows);
* it sits in whole banks at the top of LMEM (:func:`pin_offset`), at the same
  offset in both groups; everything else of either group is packed below, so
  nothing shares a bank with it and the two packings need no coordination;
* ``A`` skips the store when op ``b`` is the tensor's only reader and it is not
  a network output (:func:`store_skipped`); otherwise only the reload is saved, and ``B`` may then not
  hold every reader of the tensor (the store would serve nobody: the CP-SAT space leaves that pairing out,
  :meth:`lgopt.strategies.cpsat.space.CandidateSpace.intervals`);
* a group receives a tensor or hands one over, not both: both would claim the
  top of LMEM.  The one exception is a chain built with :func:`pin_below` (greedy's column-sliced groups,
  :mod:`lgopt.strategies.greedy`): the received tensors stay where the giver put them and the handed-over
  ones are pinned in whole banks just below, so the next group finds them at a fixed offset too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from lgopt.hw.chip import Chip
from lgopt.hw.layout import align_up
from lgopt.hw.sizing import activation_bytes
from lgopt.model.network import Network
from lgopt.model.plan import Buffer, GroupPlan


def handover(net: Network, b: int) -> tuple[str, ...]:
    """Tensors that can stay in LMEM across boundary ``b`` (between op ``b-1`` and op ``b``)."""
    if not 0 < b < len(net.ops):
        return ()
    prev, nxt = net.ops[b - 1], net.ops[b]
    if not (prev.local and nxt.local):
        return ()
    return tuple(t for t in prev.outputs if t in nxt.inputs)


def store_skipped(net: Network, tensor: str, b: int) -> bool:
    """The producer need not store ``tensor``: op ``b`` is its only reader and the network does not return it."""
    readers = {c.name for c in net.consumers.get(tensor, ())}
    return tensor not in net.outputs and readers == {net.ops[b].name}


def whole_bytes(chip: Chip, net: Network, tensors: Sequence[str]) -> int:
    """Lane bytes of the tensors held whole, each EU-aligned."""
    total = 0
    for t in tensors:
        ten = net.tensor(t)
        size = activation_bytes(chip, ten, ten.n, ten.h)
        total += align_up(size, chip.align_bytes)
    return total


def pin_offset(chip: Chip, size: int) -> int:
    """Start of the whole banks at the top of LMEM that hold ``size`` bytes (negative: they do not fit)."""
    bank = chip.bank_bytes
    return (chip.lmem_bytes - size) // bank * bank if size <= chip.lmem_bytes else -1


def packing_chip(chip: Chip, pin: int) -> Chip | None:
    """The LMEM below ``pin`` as a chip of its own: what the rest of the group is packed into."""
    if pin <= 0:
        return None
    return replace(chip, lmem_bytes=pin, lmem_banks=pin // chip.bank_bytes)


def kept_buffers(g: GroupPlan) -> tuple[Buffer, ...]:
    kept = set(g.kept_in) | set(g.kept_out)
    return tuple(b for b in g.buffers if b.kind == "activation" and b.name in kept)


def without_kept(g: GroupPlan) -> GroupPlan:
    """The group minus its handed-over buffers: what the packers place (below the pinned region)."""
    kept = {b.id for b in kept_buffers(g)}
    return replace(g, buffers=tuple(b for b in g.buffers if b.id not in kept)) if kept else g


def pin_kept(chip: Chip, g: GroupPlan) -> tuple[GroupPlan, Chip] | None:
    """The group with its handed-over buffers placed at the top, and the chip the rest packs into.

    None when the handed-over tensors leave no LMEM for the rest.
    """
    kept = kept_buffers(g)
    if not kept:
        return g, chip
    pin = pin_offset(chip, sum(align_up(b.size, chip.align_bytes) for b in kept))
    inner = packing_chip(chip, pin)
    if inner is None:
        return None
    offsets, at = {}, pin
    for b in sorted(kept, key=lambda b: b.name):
        offsets[b.id] = at
        at += align_up(b.size, chip.align_bytes)
    return g.with_offsets(offsets), inner


def pin_below(chip: Chip, g: GroupPlan, fixed: Mapping[str, int]) -> tuple[GroupPlan, Chip] | None:
    """Like :func:`pin_kept`, for a group that may both receive and hand over: received tensors at ``fixed``
    (the offsets the giving group put them at), the others in whole banks just below the lowest of those (at
    the top of LMEM when there are none), the rest packed below everything pinned.  None when a received
    tensor has no offset or nothing is left for the rest."""
    kept = kept_buffers(g)
    if not kept:
        return g, chip
    offsets: dict[int, int] = {}
    top = chip.lmem_bytes
    for b in kept:
        if b.name in g.kept_in:
            if b.name not in fixed:
                return None
            offsets[b.id] = fixed[b.name]
            top = min(top, fixed[b.name])
    rest = sorted((b for b in kept if b.name not in g.kept_in), key=lambda b: b.name)
    size = sum(align_up(b.size, chip.align_bytes) for b in rest)
    pin = (top - size) // chip.bank_bytes * chip.bank_bytes if size <= top else -1
    inner = packing_chip(chip, pin)
    if inner is None:
        return None
    at = pin
    for b in rest:
        offsets[b.id] = at
        at += align_up(b.size, chip.align_bytes)
    return g.with_offsets(offsets), inner

"""One kept compile's timeline as calibration rows: what the fit reads, made for any setting the judge compiles.

The shared calibration (``shared/calibration``, F16 on one core) gives every TIU and GDMA command of a compile
to the op and slice that issued it (``ops.csv.gz``).  INT8 needs the same data, made the same way: the scoring
tool keeps a compile (``score_grouping.sh --keep``: its ``*_final.mlir`` and codegen's timeline), and this module
reads the two together.  A command names the ``final.mlir`` line of the op that issued it
(``Conv2D_21|CONV|s:..|e:..|t:6552``); an op inside a ``tpu.Group`` runs once per slice, and its ``ginfo`` lists
the slices (``n_slice = [..], h_slice = [..]``, loops N, C, H, W from the outside in), so its commands, in
time order, split into that many runs of equal length, one per slice.  An op whose commands do not split evenly
is left out (counted in :attr:`Timeline.uneven`): a guess at which command belongs to which slice would teach
the fit noise.

One core's timeline is read (``compiler_profile_<core>.txt``, BM1684's ``_<core>.dat``; core 0 by default): on one
core it is the whole compile.  On several cores each core's timeline is simulated on its own (its sync commands
cost 0 and it never waits for another core: core 1 of resnet18 on BM1688 with 2 cores ends at 97,160 cycles in a
compile whose total, core 0's end, is 1,074,161), and a group's slices are shared between the cores in
contiguous chunks (:func:`lgopt.model.plan.core_chunks`), so a core's rows are its chunk of each group's slices.
The rows follow ``shared/calibration/README.md``'s columns.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from lgopt.model.plan import core_chunks

COMMAND = re.compile(r"([A-Za-z0-9]+?)_(\d+)\|([A-Za-z_0-9]+)\|s:(\d+)\|b:\d+\|g:\d+(?:\|[a-z]+:\d+)*\|e:(\d+)"
                     r"\|t:(\d+)(?:\|dr:(\d+)\|sz:(\d+))?")
PROFILES = ("compiler_profile_{core}.txt", "_{core}.dat")  # a core's timeline as codegen writes it; BM1684's the second
OP_LINE = re.compile(r'^\s*(?:%[\w#:]+(?:, %[\w#:]+)* = )?"(tpu|top)\.(\w+)"(?:\(([^)]*)\))?')
LOC_DEF = re.compile(r'^#(loc\d*) = loc\("([^"]*)"\)')
LOC_USE = re.compile(r"loc\(#(loc\d*)\)\s*$")
RESULT = re.compile(r"-> (?:\()?tensor<((?:\d+x)+)")
SLICES = {k: re.compile(rf"\b{k}_slice = \[([\d, ]*)\]") for k in ("n", "c", "h", "w")}
OPS_COLUMNS = ["model", "chip", "variant", "group_pos", "op_name", "op_type", "role", "tensor", "is_weight", "engine",
               "slice_idx", "n_slices", "n_cmds", "cycles", "start", "end", "bytes", "dir", "out_shape", "nslice",
               "cslice", "hslice", "wslice"]


@dataclass(frozen=True)
class Command:
    """One command of the timeline: the ``final.mlir`` line that issued it, its kind, start and cost (cycles),
    and for a transfer its direction (0: to LMEM, 1: from it) and bytes."""

    line: int
    kind: str
    start: int
    cycles: int
    direction: int | None
    nbytes: int | None

    @property
    def gdma(self) -> bool:
        return self.nbytes is not None


Sizes = tuple[int, int, int, int]  # one slice's n, c, h and w sizes (``ginfo``'s ``n_slice`` ... ``w_slice``)


@dataclass(frozen=True)
class Line:
    """An op of ``final.mlir``: its type, name (its location), the value it reads first, result shape and the
    slices its ``ginfo`` lists (empty outside a group)."""

    number: int
    type: str
    name: str
    operand: str
    shape: str
    slices: tuple[Sizes, ...]


@dataclass(frozen=True)
class Timeline:
    """A kept compile in calibration rows: ``ops`` (op x slice x engine in groups, op x engine outside them) and
    ``glob`` (one row per global op); ``uneven`` ops whose commands did not split into their slices."""

    ops: pd.DataFrame
    glob: pd.DataFrame
    uneven: tuple[str, ...]


def read_commands(path: Path) -> list[Command]:
    """Every command of a codegen timeline file, in file order.

    >>> import tempfile, os
    >>> f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    >>> _ = f.write("Conv2D_21|CONV|s:19484|b:18|g:10|e:26035|t:6552   "
    ...             "Load_5|GDMA_TENSOR|s:0|b:0|g:1|e:99|t:100|dr:0|sz:4096|bw:41.0\\n")
    >>> f.close(); [(c.line, c.kind, c.cycles, c.nbytes) for c in read_commands(Path(f.name))]; os.unlink(f.name)
    [(21, 'CONV', 6552, None), (5, 'GDMA_TENSOR', 100, 4096)]
    """
    out = []
    for text in path.read_text(errors="replace").splitlines():
        for m in COMMAND.finditer(text):
            out.append(Command(int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(6)),
                               None if m.group(7) is None else int(m.group(7)),
                               None if m.group(8) is None else int(m.group(8))))
    return out


def read_lines(path: Path) -> dict[int, Line]:
    """The ``tpu`` ops of a ``final.mlir`` by line number (1-based, as the timeline names them)."""
    text = path.read_text().splitlines()
    locs = {m.group(1): m.group(2) for t in text if (m := LOC_DEF.match(t))}
    out = {}
    for no, t in enumerate(text, 1):
        m = OP_LINE.match(t)
        if m is None or m.group(1) != "tpu":
            continue
        loc = LOC_USE.search(t)
        shape = RESULT.findall(t)
        lists = [[int(v) for v in s.group(1).split(",") if v.strip()] if (s := SLICES[k].search(t)) else []
                 for k in ("n", "c", "h", "w")]
        slices = tuple((n, c, h, w) for n, c, h, w in itertools.product(*lists)) if all(lists) else ()
        out[no] = Line(no, m.group(2), locs.get(loc.group(1), "") if loc else "", (m.group(3) or "").split(",")[0],
                       shape[-1].rstrip("x") if shape else "", slices)
    return out


def weight_values(path: Path) -> set[str]:
    """The SSA values a ``final.mlir`` defines as ``top.Weight`` (a Load of one loads a weight)."""
    rx = re.compile(r'^\s*(%[\w#]+) = "top\.Weight"')
    return {m.group(1) for t in path.read_text().splitlines() if (m := rx.match(t))}


def group_of(line: int, spans: list[tuple[int, int]]) -> int:
    """The position of the group whose ``final.mlir`` lines hold ``line`` (-1: none)."""
    return next((k for k, (a, b) in enumerate(spans) if a <= line <= b), -1)


def _runs(cmds: list[Command], k: int) -> list[list[Command]] | None:
    """``cmds`` (one engine's commands of one op) in ``k`` runs of equal length in time order, or None."""
    cmds = sorted(cmds, key=lambda c: c.start)
    if k < 1 or len(cmds) % k:
        return None
    step = len(cmds) // k
    return [cmds[i:i + step] for i in range(0, len(cmds), step)]


def _role(op_type: str) -> str:
    return {"Load": "load", "Store": "store"}.get(op_type, "compute")


def _row(ln: Line, pos: int, dma: bool, run: list[Command], i: int, n: int, weight: bool) -> dict[str, Any]:
    """The columns of one op's slice ``i`` of ``n`` on one engine (``run``: its commands) but the key and shape;
    ``start`` and ``end`` its first command's start and its last one's end (inclusive), as the calibration's."""
    moves = ln.type in ("Load", "Store")
    return {"group_pos": pos, "op_name": ln.name, "op_type": ln.type, "role": _role(ln.type) if pos >= 0 else "global",
            "tensor": ln.name.removeprefix("load_").removeprefix("store_") if moves else None,
            "is_weight": float(weight) if ln.type == "Load" else None, "engine": "GDMA" if dma else "TIU",
            "slice_idx": i, "n_slices": n, "n_cmds": len(run), "cycles": sum(c.cycles for c in run),
            "start": min(c.start for c in run), "end": max(c.start + c.cycles - 1 for c in run),
            "bytes": sum(c.nbytes or 0 for c in run) if dma else None, "dir": run[0].direction if dma else None,
            "out_shape": ln.shape}


def profile_of(workdir: Path, core: int = 0) -> Path:
    """The timeline codegen wrote for ``core`` in ``workdir`` (``StopIteration`` when there is none)."""
    return next(p for name in PROFILES for p in sorted(workdir.glob(name.format(core=core))))


def core_slices(slices: tuple[Sizes, ...], core: int, cores: int) -> tuple[Sizes, ...]:
    """The slices of a group op that ``core`` of ``cores`` runs: its chunk of them in loop order.  An op of one
    slice (a weight's load: its ``ginfo`` lists one) runs on every core that runs a part of the group (each core
    loads the group's weights; a core with no part has no commands to read).

    >>> core_slices(((1, 64, 4, 56), (1, 64, 4, 56), (1, 64, 3, 56)), 1, 2)
    ((1, 64, 3, 56),)
    >>> core_slices(((1, 64, 1, 576),), 1, 2)
    ((1, 64, 1, 576),)
    """
    if len(slices) <= 1:
        return slices
    chunks = core_chunks(len(slices), cores)
    return slices[slice(*chunks[core])] if core < len(chunks) else ()


def read_timeline(workdir: Path, score: Mapping[str, Any], key: Mapping[str, str], core: int = 0,
                  cores: int = 1) -> Timeline:
    """The calibration rows of one kept compile in ``workdir`` (its score JSON ``score``) on ``core`` of the
    ``cores`` it was compiled for; ``key`` (``model``, ``chip``, ``variant``) is put on every row."""
    final = next(workdir.glob("*_final.mlir"))
    profile = profile_of(workdir, core)
    lines, weights = read_lines(final), weight_values(final)
    spans = [(int(a), int(b)) for a, b in (g.get("final_mlir_lines") or (-1, -1) for g in score.get("groups", ()))]
    by_line: dict[tuple[int, bool, int], list[Command]] = {}  # a global op's transfers both ways apart
    for cmd in read_commands(profile):
        by_line.setdefault((cmd.line, cmd.gdma, cmd.direction or 0), []).append(cmd)
    rows: list[dict[str, Any]] = []
    uneven = []
    for (no, dma, _), cmds in sorted(by_line.items()):
        ln = lines.get(no)
        if ln is None:
            continue
        pos = group_of(no, spans)
        slices = core_slices(ln.slices, core, cores) if pos >= 0 and ln.slices else ((0, 0, 0, 0),)
        runs = _runs(cmds, len(slices))
        if runs is None:
            uneven.append(ln.name)
            continue
        rows += [{**key, **_row(ln, pos, dma, run, i, len(slices), ln.operand in weights),
                  **({"nslice": sn, "cslice": sc, "hslice": sh, "wslice": sw} if pos >= 0 else {})}
                 for i, (run, (sn, sc, sh, sw)) in enumerate(zip(runs, slices))]
    ops = pd.DataFrame(rows, columns=OPS_COLUMNS)
    return Timeline(ops, _globals(ops, score, lines, key), tuple(uneven))


def _globals(ops: pd.DataFrame, score: Mapping[str, Any], lines: dict[int, Line], key: Mapping[str, str]
             ) -> pd.DataFrame:
    """``globals.csv`` rows: each global op's segment of the timeline (the scoring tool's ``cycles``) and its
    transfers' busy cycles and bytes each way."""
    g = ops[ops.group_pos < 0]
    rows = []
    for o in score.get("global_ops", ()):
        x = g[g.op_name == o.get("name")]
        dma = x[x.engine == "GDMA"]
        ln = lines.get(int(o.get("final_mlir_line") or -1))
        rows.append({**key, "name": o.get("name"), "type": o.get("type"), "out_shape": ln.shape if ln else "",
                     "cycles": o.get("cycles", 0), "gdma_cycles": int(dma.cycles.sum()),
                     "gdma_bytes_s2l": int(dma[dma.dir == 0].bytes.sum()),
                     "gdma_bytes_l2s": int(dma[dma.dir == 1].bytes.sum())})
    return pd.DataFrame(rows, columns=[*key, "name", "type", "out_shape", "cycles", "gdma_cycles", "gdma_bytes_s2l",
                                       "gdma_bytes_l2s"])

"""Chip parameters: the numbers that decide what fits in LMEM and what it costs.

Every preset value carries its source in :data:`SOURCES`.  Architecture numbers
(lanes, EU bytes, LMEM, banks, IC parallelism, DMA alignment, cores) come from
the TPU-MLIR backend headers as summarised in ``shared/reference`` section 8.
Throughput and bandwidth numbers come from public product specifications where
they exist and are marked ``assumption`` where they do not: a user who knows
better overrides them with ``--set`` or a chip file, which is the point of
exposing them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from lgopt.errors import LgoptError
from lgopt.model.dtype import DTYPE_BYTES
from lgopt.model.network import Network, Op

REF = "shared/reference/tpu-mlir-layergroup.md s8 (TPU-MLIR backend headers)"


@dataclass(frozen=True)
class Chip:
    """One TPU core as the layer-group problem sees it.

    Addresses in LMEM are per lane: a buffer at ``offset`` occupies bytes
    ``[offset, offset + size)`` of every lane it touches, and every tensor
    starts at lane 0 (the seed's advice: do not reuse the empty blocks that a
    tensor starting at another lane leaves behind).
    """

    name: str
    npu_num: int  # lanes (NPUs); channels are scattered round-robin over them
    eu_bytes: int  # bytes one lane's execution units take per cycle; aligned-layout C stride unit
    lmem_bytes: int  # LMEM bytes per lane
    lmem_banks: int
    ic_parallel: int  # conv weights interleave ic_parallel/bytes input channels innermost
    dma_align_bytes: int
    cores: int
    align_4n: bool  # int8 batches packed 4 to a 32-bit word (BM1684), int16 2 to a word
    tiu_mhz: float
    gdma_gbps: float  # GMEM<->LMEM bandwidth, GB/s (1e9 bytes)
    gdma_latency_cycles: int  # fixed cost of one DMA transfer, in TIU cycles
    macs_per_lane: Mapping[str, int]  # conv/matmul MACs per lane per TIU cycle, by dtype
    cost_model: str = "analytic"  # the registered cost model that turns work and bytes into cycles
    matmul_in_groups: bool = True  # whether the chip's compiler puts MatMul in layer groups (not on cv18xx)
    # the cores a deployment spreads each group's slices over (TPU-MLIR's --num_core, lgopt's --cores; at most
    # ``cores``): a setting of the run, not of the chip, so it is no change from the preset (``changes``)
    used_cores: int = 1
    # how a convolution's work buffer is sized: "reference" (shared/reference s6), or the TPU-MLIR 1.30.2 rule
    # of a chip family that its final.mlir files confirm ("bm1684", "bm1684x", "bm1688", "bm1690":
    # lgopt.hw.sizing.conv_buffer_bytes), which also decides the folded-tap (3ic) conv layout
    conv_buffers: str = "reference"

    def __hash__(self) -> int:  # chips key the cost caches: hashed once
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:  # the MAC table is a mapping; hash its items
        return hash((self.name, self.npu_num, self.eu_bytes, self.lmem_bytes, self.lmem_banks, self.ic_parallel,
                     self.align_4n, self.tiu_mhz, self.gdma_gbps, self.gdma_latency_cycles,
                     tuple(sorted(self.macs_per_lane.items())), self.cost_model, self.matmul_in_groups,
                     self.used_cores, self.conv_buffers))

    @property
    def bank_bytes(self) -> int:
        return self.lmem_bytes // self.lmem_banks

    @property
    def align_bytes(self) -> int:
        """Local address alignment: the aligned layout starts on an EU boundary."""
        return self.eu_bytes

    def eu_elems(self, dtype: str) -> int:
        """Elements of ``dtype`` one lane processes per cycle (EU_NUM)."""
        return max(1, self.eu_bytes // DTYPE_BYTES[dtype])

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["macs_per_lane"] = dict(self.macs_per_lane)
        if self.cost_model == "analytic":  # the default is left out: plans written before it existed read the same
            del d["cost_model"]
        if self.matmul_in_groups == getattr(PRESETS.get(self.name.lower()), "matmul_in_groups", True):  # likewise
            del d["matmul_in_groups"]
        if self.used_cores == 1:  # one core, as every plan before several cores existed
            del d["used_cores"]
        if self.conv_buffers == getattr(PRESETS.get(self.name.lower()), "conv_buffers", "reference"):
            del d["conv_buffers"]  # the preset's rule, read back from the name
        return d

    def local(self, op: Op) -> bool:
        """Whether ``op`` may run in a layer group on this chip (a local op its compiler does not keep out)."""
        return op.local and not self.group_rule(op.type)

    def group_rule(self, op_type: str) -> str:
        """Why this chip's compiler keeps ops of ``op_type`` out of layer groups ("" when it does not)."""
        if op_type == "MatMul" and not self.matmul_in_groups:
            return f"MatMul runs as a global layer on {self.name} (TPU-MLIR's CV18xx backend has no matmul groups)"
        return ""


def for_chip(net: Network, chip: Chip) -> Network:
    """``net`` with the ops ``chip``'s compiler keeps out of groups made global layers, each with the reason
    (the same network when there are none: a plan's digest is always of the network as the user gave it)."""
    from dataclasses import replace

    ops = tuple(replace(op, local=False, h_split=False, n_split=False, reason=chip.group_rule(op.type))
                if op.local and chip.group_rule(op.type) else op for op in net.ops)
    return net if all(a is b for a, b in zip(ops, net.ops)) else replace(net, ops=ops)


CONV_BUFFERS = ("reference", "bm1684", "bm1684x", "bm1688", "bm1690")  # lgopt.hw.sizing.conv_buffer_bytes


def _macs(int8: int, f16: int, f32: int) -> dict[str, int]:
    return {"int8": int8, "uint8": int8, "int16": max(1, int8 // 2), "f16": f16, "bf16": f16, "f32": f32}


PRESETS: dict[str, Chip] = {
    "bm1684x": Chip("bm1684x", 64, 64, 256 * 1024, 16, 64, 512, 1, False, 1000.0, 64.0, 300, _macs(256, 128, 16),
                    conv_buffers="bm1684x"),
    "bm1688": Chip("bm1688", 32, 16, 128 * 1024, 16, 32, 512, 2, False, 900.0, 24.0, 300, _macs(128, 32, 4),
                   conv_buffers="bm1688"),
    "bm1684": Chip("bm1684", 64, 128, 512 * 1024, 8, 1, 512, 1, True, 550.0, 32.0, 300, _macs(256, 32, 32),
                   conv_buffers="bm1684"),
    "bm1690": Chip("bm1690", 64, 64, 256 * 1024, 16, 64, 256, 8, False, 1000.0, 73.2, 300, _macs(256, 128, 16),
                   conv_buffers="bm1690"),
    "sg2380": Chip("sg2380", 32, 16, 128 * 1024, 16, 32, 256, 4, False, 1000.0, 32.0, 300, _macs(64, 16, 4)),
    "cv184x": Chip("cv184x", 8, 16, 64 * 1024, 16, 16, 256, 1, False, 900.0, 8.0, 300, _macs(64, 16, 4),
                   matmul_in_groups=False),
    "cv181x": Chip("cv181x", 8, 16, 32 * 1024, 8, 1, 16, 1, False, 500.0, 4.0, 300, _macs(64, 16, 4),
                   matmul_in_groups=False),
}

# Where each preset number comes from.  Keys are "<chip>.<field>" or "*.<field>".
SOURCES: dict[str, str] = {
    "*.npu_num": REF,
    "*.eu_bytes": REF,
    "*.lmem_bytes": REF,
    "*.lmem_banks": REF,
    "*.ic_parallel": REF,
    "*.dma_align_bytes": REF,
    "*.cores": REF,
    "*.used_cores": "the run's setting (--cores; TPU-MLIR's --num_core, default 1)",
    "*.gdma_latency_cycles": "assumption: a few hundred cycles of descriptor and DDR latency per GDMA transfer",
    "*.cost_model": "lgopt's analytic model (docs/cost-model.md); its constants are assumptions",
    "*.matmul_in_groups": "shared/reference s1: BM1684X-family chips have matmul groups (GROUP_MM)",
    "*.conv_buffers": "TPU-MLIR 1.30.2's Conv2D buffer sizes in the calibration models' final.mlir (every conv)",
    "sg2380.conv_buffers": "assumption: shared/reference s6 (no final.mlir of this chip read)",
    "cv184x.conv_buffers": "assumption: shared/reference s6 (no final.mlir of this chip read)",
    "cv181x.conv_buffers": "assumption: shared/reference s6 (no final.mlir of this chip read)",
    "cv184x.matmul_in_groups": "shared/reference s1: cv18xx uses GROUP_NORMAL only: no matmul groups",
    "cv181x.matmul_in_groups": "shared/reference s1: cv18xx uses GROUP_NORMAL only: no matmul groups",
    "bm1684.align_4n": REF + " (ALIGN_4N)",
    "*.align_4n": REF,
    "bm1684.ic_parallel": "assumption: no IC interleave on BM1684 (reference gives none)",
    "cv181x.ic_parallel": "assumption: no IC interleave on CV18xx (reference gives none)",
    "cv181x.dma_align_bytes": "assumption: reference gives none for CV18xx",
    "bm1684x.tiu_mhz": "shared/reference s8: profile defs, TIU/GDMA 1 GHz",
    "bm1684x.gdma_gbps": "assumption: LPDDR4X-4266 x128 is 68 GB/s peak; 64 GB/s usable",
    "bm1684x.macs_per_lane": "Sophgo BM1684X spec 32 TOPS int8 / 16 TFLOPS f16 / 2 TFLOPS f32 at 1 GHz over 64 lanes",
    "bm1688.tiu_mhz": "shared/reference s8: profile defs, TIU 900 MHz",
    "bm1688.gdma_gbps": "shared/reference s8: TPU-MLIR GDMA model forces 24 GB/s",
    "bm1688.macs_per_lane": "Sophgo BM1688 spec 16 TOPS int8 / 4 TFLOPS f16 / 0.5 TFLOPS f32, "
                            "2 cores at 900 MHz, 32 lanes",
    "bm1684.tiu_mhz": "assumption: BM1684 TPU clock 550 MHz",
    "bm1684.gdma_gbps": "assumption: LPDDR4 32 GB/s",
    "bm1684.macs_per_lane": "Sophgo BM1684 spec 17.6 TOPS int8 / 2.2 TFLOPS f32 at 550 MHz over 64 lanes; "
                            "f16 runs at f32 rate (assumption: no f16 unit)",
    "bm1690.tiu_mhz": "shared/reference s8: TIU/DMA 1 GHz",
    "bm1690.gdma_gbps": "measured: TPU-MLIR 1.30.2's timeline moves up to 73.1 bytes a cycle at 1 GHz on one core "
                        "(the most of 26,400 BM1690 transfers, F16 and INT8; weights stream at 70.8 in the median), "
                        "above shared/reference s8's DDR 68 GB/s per core, which would make a transfer faster than "
                        "the peak",
    "bm1690.macs_per_lane": "assumption: SG2260 256 TOPS int8 / 128 TFLOPS f16 over 8 cores x 64 lanes at 1 GHz; "
                            "f32 1/8 of f16",
    "sg2380.tiu_mhz": "assumption",
    "sg2380.gdma_gbps": "assumption",
    "sg2380.macs_per_lane": "assumption: 20 TOPS int8 over 4 cores x 32 lanes",
    "cv184x.tiu_mhz": "assumption",
    "cv184x.gdma_gbps": "assumption",
    "cv184x.macs_per_lane": "assumption",
    "cv181x.tiu_mhz": "assumption: CV1812/CV181x TPU at 500 MHz",
    "cv181x.gdma_gbps": "assumption: DDR3 16-bit class part, 4 GB/s usable",
    "cv181x.macs_per_lane": "assumption: 0.5 TOPS int8 over 8 lanes at 500 MHz",
}


def source_of(chip: str, field: str) -> str:
    return SOURCES.get(f"{chip}.{field}") or SOURCES.get(f"*.{field}", "assumption")


def changes(chip: Chip) -> dict[str, tuple[Any, Any]]:
    """``{parameter: (preset value, this chip's value)}`` for every value that differs from the preset the
    chip is named after (``macs_per_lane.DTYPE`` one by one); empty for a preset or a chip of unknown name.

    A chip changed with ``--set`` or a chip file keeps its preset's name (plans, calibrations and the
    TPU-MLIR exporter look chips up by it), so whatever shows a chip says what was changed instead.

    >>> changes(with_overrides(PRESETS["cv181x"], {"tiu_mhz": "600"}))
    {'tiu_mhz': (500.0, 600.0)}
    """
    base = PRESETS.get(chip.name.lower())
    if base is None:
        return {}
    out: dict[str, tuple[Any, Any]] = {}
    for f in dataclasses.fields(Chip):
        if f.name in ("name", "macs_per_lane", "cost_model", "used_cores"):  # the model prices the chip and the
            # deployment chooses its cores: neither changes the chip
            continue
        a, b = getattr(base, f.name), getattr(chip, f.name)
        if a != b:
            out[f.name] = (a, b)
    for dt in sorted(set(base.macs_per_lane) | set(chip.macs_per_lane)):
        a, b = base.macs_per_lane.get(dt), chip.macs_per_lane.get(dt)
        if a != b:
            out[f"macs_per_lane.{dt}"] = (a, b)
    return out


def label(chip: Chip) -> str:
    """The chip's name, and what was changed from its preset: ``cv181x (modified: tiu_mhz 500 -> 600)``.

    >>> label(PRESETS["bm1688"])
    'bm1688'
    """
    ch = changes(chip)
    if not ch:
        return chip.name
    return f"{chip.name} (modified: " + ", ".join(f"{k} {_fmt(a)} -> {_fmt(b)}" for k, (a, b) in ch.items()) + ")"


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def source_of_value(chip: Chip, field: str) -> str:
    """Where ``chip``'s value of ``field`` comes from: the preset's source, or the user's change of it."""
    ch = changes(chip)
    hits = [k for k in ch if k == field or k.startswith(field + ".")]
    if not hits:
        return source_of(chip.name, field)
    was = ", ".join(f"{k.split('.', 1)[1]} {_fmt(ch[k][0])}" if "." in k else _fmt(ch[k][0]) for k in hits)
    return f"changed by the user (preset {chip.name}: {was}; {source_of(chip.name, field)})"


_INT_FIELDS = {"npu_num", "eu_bytes", "lmem_bytes", "lmem_banks", "ic_parallel", "dma_align_bytes", "cores",
               "gdma_latency_cycles", "used_cores"}
_FLOAT_FIELDS = {"tiu_mhz", "gdma_gbps"}
_SUFFIX = {"": 1, "k": 1024, "ki": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mi": 1024**2, "mb": 1024**2,
           "mib": 1024**2}


def parse_size(text: str) -> int:
    """'32K' -> 32768; sizes are binary because LMEM sizes are."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SUFFIX:
        raise LgoptError(f"bad size {text!r}: expected an integer with optional K or M suffix")
    return int(m.group(1)) * _SUFFIX[m.group(2).lower()]


def _coerce(field: str, value: Any) -> Any:
    if field in _INT_FIELDS:
        if isinstance(value, bool):
            raise LgoptError(f"chip parameter {field} must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return parse_size(str(value))
    if field in _FLOAT_FIELDS:
        try:
            if isinstance(value, bool):
                raise TypeError
            out = float(value)
        except (TypeError, ValueError):
            raise LgoptError(f"chip parameter {field} must be a number, got {value!r}") from None
        if not math.isfinite(out):
            raise LgoptError(f"chip parameter {field} must be a finite number, got {value!r}")
        return out
    if field in ("align_4n", "matmul_in_groups"):
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise LgoptError(f"chip parameter {field} must be true or false, got {value!r}")
    if field in ("name", "cost_model"):
        return str(value)
    if field == "conv_buffers":
        if str(value) not in CONV_BUFFERS:
            raise LgoptError(f"chip parameter conv_buffers must be one of {', '.join(CONV_BUFFERS)}, got {value!r}")
        return str(value)
    raise LgoptError(f"unknown chip parameter {field!r}")


def with_overrides(chip: Chip, overrides: Mapping[str, Any]) -> Chip:
    """Apply ``{field: value}`` (``macs_per_lane.f16`` addresses one dtype) and validate."""
    changes: dict[str, Any] = {}
    macs = dict(chip.macs_per_lane)
    for key, value in overrides.items():
        key = key.strip()
        if key.startswith("macs_per_lane."):
            dt = key.split(".", 1)[1]
            if dt not in macs:
                raise LgoptError(f"unknown dtype in chip parameter {key!r}")
            macs[dt] = _coerce("npu_num", value)
        elif key == "macs_per_lane" and isinstance(value, Mapping):
            for dt, v in value.items():
                if dt not in macs:
                    raise LgoptError(f"unknown dtype in chip parameter macs_per_lane.{dt}")
                macs[dt] = _coerce("npu_num", v)
        else:
            changes[key] = _coerce(key, value)
    new = dataclasses.replace(chip, macs_per_lane=macs, **changes)
    validate(new)
    return new


def validate(chip: Chip) -> None:
    """Reject parameters no chip can have; the message names the parameter."""
    for f in ("npu_num", "eu_bytes", "lmem_bytes", "lmem_banks", "ic_parallel", "dma_align_bytes", "cores",
              "used_cores"):
        if getattr(chip, f) < 1:
            raise LgoptError(f"chip {chip.name}: {f} must be at least 1, got {getattr(chip, f)}")
    if chip.used_cores > chip.cores:
        raise LgoptError(f"chip {chip.name} has {chip.cores} core(s): a deployment cannot use {chip.used_cores}")
    if chip.gdma_latency_cycles < 0:
        raise LgoptError(f"chip {chip.name}: gdma_latency_cycles must not be negative")
    for f, lo, hi in (("tiu_mhz", 1e-3, 1e6), ("gdma_gbps", 1e-3, 1e6)):
        v = getattr(chip, f)  # a clock or bandwidth outside these is a typo, and breaks integer cycle counts
        if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
            raise LgoptError(f"chip {chip.name}: {f} must be a finite number from {lo:g} to {hi:g}, got {v!r}")
    if chip.dma_align_bytes & (chip.dma_align_bytes - 1):
        raise LgoptError(f"chip {chip.name}: dma_align_bytes must be a power of two, got {chip.dma_align_bytes}")
    if chip.eu_bytes & (chip.eu_bytes - 1):
        raise LgoptError(f"chip {chip.name}: eu_bytes must be a power of two, got {chip.eu_bytes}")
    if chip.lmem_bytes < chip.eu_bytes:
        raise LgoptError(f"chip {chip.name}: lmem_bytes {chip.lmem_bytes} is smaller than one aligned row "
                         f"({chip.eu_bytes} bytes)")
    if chip.lmem_bytes % chip.lmem_banks:
        raise LgoptError(f"chip {chip.name}: lmem_banks {chip.lmem_banks} does not divide lmem_bytes {chip.lmem_bytes}")
    if chip.bank_bytes % chip.eu_bytes:
        raise LgoptError(f"chip {chip.name}: bank size {chip.bank_bytes} is not a multiple of eu_bytes {chip.eu_bytes}")
    for dt, v in chip.macs_per_lane.items():
        if v < 1:
            raise LgoptError(f"chip {chip.name}: macs_per_lane.{dt} must be at least 1")


def parse_set(items: list[str] | None) -> dict[str, str]:
    """``["lmem_bytes=64K", ...]`` -> dict; a malformed item is an input error."""
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise LgoptError(f"bad --set {item!r}: expected key=value")
        k, v = item.split("=", 1)
        if not k.strip():
            raise LgoptError(f"bad --set {item!r}: empty key")
        out[k.strip()] = v.strip()
    return out


def load_chip_file(path: str | Path) -> dict[str, Any]:
    """A TOML or JSON table of overrides; ``base`` names the preset to start from."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise LgoptError(f"cannot read chip file {path}: {e.strerror}") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise LgoptError(f"chip file {path} is not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {e}") from None
    if not isinstance(data, dict):
        raise LgoptError(f"chip file {path} must hold a table of parameters")
    return data


DEFAULT_CHIP = "bm1684x"


def get_chip(name: str | None = None, overrides: Mapping[str, Any] | None = None,
             chip_file: str | Path | None = None) -> Chip:
    """A preset (``name``, default :data:`DEFAULT_CHIP`), then a chip file's values, then ``--set`` values,
    validated.  A chip file names its preset with ``base``; without one it needs ``name`` given: a silent
    default preset would make every value the file does not set a guess."""
    values: dict[str, Any] = {}
    if chip_file is not None:
        values.update(load_chip_file(chip_file))
        base = values.pop("base", None)
        if base is None and name is None:
            raise LgoptError(f"chip file {chip_file} does not name its preset: add base = \"NAME\" "
                             f"(one of {', '.join(PRESETS)}) or pass --chip NAME")
        if base is not None and name is not None and str(base).lower() != name.lower():
            raise LgoptError(f"chip file {chip_file} is based on {base}, but --chip says {name}")
        name = str(base if base is not None else name)
    name = DEFAULT_CHIP if name is None else name
    key = name.lower()
    if key not in PRESETS:
        raise LgoptError(f"unknown chip {name!r} (presets: {', '.join(PRESETS)})")
    values.update(overrides or {})
    return with_overrides(PRESETS[key], values)


def chip_from_dict(d: Mapping[str, Any]) -> Chip:
    """Rebuild a chip stored in a plan, validating it like any other input."""
    base = PRESETS.get(str(d.get("name", "")).lower(), PRESETS["bm1684x"])
    vals = {k: v for k, v in d.items() if k != "macs_per_lane"}
    chip = with_overrides(base, vals)
    if "macs_per_lane" in d:
        chip = with_overrides(chip, {"macs_per_lane": d["macs_per_lane"]})
    return chip

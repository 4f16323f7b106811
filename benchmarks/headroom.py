"""The compiler space's rules for new groups, applied to the calibration's groups: which would they refuse?

    python benchmarks/headroom.py    # about half a minute; writes benchmarks/calibration/headroom.csv (not tracked)

Without a judge, ``solve --reference`` holds a group that is not one of the reference's own to its cautions
(``lgopt.strategies.settings.packing``, ``docs/tpu-mlir.md`` "Headroom for the groups TPU-MLIR has not
compiled" and "Forks, transformer rows and the reference's casts"): it packs below the top ``reserve_banks``
banks; it packs as TPU-MLIR's allocator would need (one-slice: weight loads where TPU-MLIR's timestep pass
moves them; by lgopt's greedy allocators, not only its exact packer) and passes TPU-MLIR's time-step rules (no
fork its pass cannot slice); it budgets the f32 copies of the tensors the reference's casts convert; and it cuts
no tensor into slices shorter than the chip's ``slice_rows`` (the fitted transfer rates hold from there).
Every group of the 473 calibration groupings that lgopt's reader builds is packed that way, and counted
against what TPU-MLIR did with it: compiled (in opt2, or in another grouping) or the group it failed to
allocate.  The rules are a caution for new groups, not a predictor: this says what they cost and catch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from common import CAL

from lgopt.cost.registry import min_slice_rows
from lgopt.errors import LgoptError
from lgopt.group.alloc import exact_pack, multi_start_allocate
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.strategies.settings import SearchSettings, packing, shape_of
from lgopt.tpumlir.cache import load_cache
from lgopt.tpumlir.grouping import build_groups
from lgopt.tpumlir.lowering import lower_like
from lgopt.tpumlir.rules import TPU_MLIR_RULES
from lgopt.tpumlir.space import f32_tensors

ROOT = Path(__file__).resolve().parents[1]
RULES = ("2 banks", "compiler packing", "f32 copies", "short slices", "all (the default)")


def rules(f32: frozenset[str], rows: int) -> dict[str, SearchSettings]:
    """The rules one at a time and together (``f32``: the tensors the reference's casts convert,
    ``registry.f32_tensors``; ``rows``: the chip's ``slice_rows``).  "compiler packing" includes the fork rule
    (lgopt.tpumlir.forks); "short slices" refuses a group cutting a tensor into slices shorter than ``rows``
    (``settings.short_slices``)."""
    return {"2 banks": SearchSettings(reserve_banks=2), "compiler packing": SearchSettings(compiler=TPU_MLIR_RULES),
            "f32 copies": SearchSettings(compiler=TPU_MLIR_RULES, f32_tensors=f32),
            "short slices": SearchSettings(min_slice_rows=rows),
            "all (the default)": SearchSettings(reserve_banks=2, compiler=TPU_MLIR_RULES, f32_tensors=f32,
                                                min_slice_rows=rows)}


def packs(net, chip, st: SearchSettings, g) -> bool:
    room, table = packing(chip, net, st, g)
    if room is None:
        return False
    if multi_start_allocate(net, room, table, "soft") is not None:
        return True
    return not st.compiler_packing and isinstance(exact_pack(net, room, table, "off", 2.0, 0, 2), dict)


def main() -> int:
    if not (CAL / "totals.csv").exists():
        print(f"no calibration data at {CAL}", file=sys.stderr)
        return 2
    tot = pd.read_csv(CAL / "totals.csv")
    nets: dict[str, object] = {}
    f32: dict[tuple[str, str], frozenset[str]] = {}
    rows = []
    for r in tot.itertuples(index=False):
        if r.model not in nets:
            nets[r.model] = load_model(CAL / "onnx" / f"{r.model}.weightless.onnx", dtype="f16")
        chip = get_chip(r.chip, {"cost_model": "tpu-mlir-1.30"})
        path = str(CAL / r.cache_file)
        try:
            built = build_groups(nets[r.model], chip, path, exact=True)
        except LgoptError:
            continue
        net = lower_like(nets[r.model], load_cache(path), chip)[0]
        if (r.model, r.chip) not in f32:
            opt2 = CAL / "caches" / f"{r.model}_{r.chip}" / "opt2.layer_group_cache.json"
            f32[(r.model, r.chip)] = f32_tensors(net, load_cache(str(opt2)))
        for gr in built.groups:
            g = gr.plan
            if g is None:
                continue
            if r.status == "ok":
                status = "compiled"
            elif not pd.isna(r.failed_group_pos) and int(r.failed_group_pos) == gr.index:
                status = "failed"
            else:
                continue  # a group of a refused grouping other than the one that failed: unknown
            shape = shape_of(g)
            rows.append({"model": r.model, "chip": r.chip, "variant": r.variant, "group_pos": gr.index,
                         "ops": len(g.ops), "slices": g.num_slices, "status": status,
                         "shape": f"{r.model}/{r.chip}/{sorted(shape[0])[0]}+{len(shape[0])}/{shape[1:]}",
                         **{name: packs(net, chip, st, g)
                            for name, st in rules(f32[(r.model, r.chip)], min_slice_rows(chip)).items()}})
    df = pd.DataFrame(rows)
    opt2 = set(df.loc[(df.variant == "opt2") & (df.status == "compiled"), "shape"])
    df["opt2's"] = df["shape"].isin(opt2)
    df.to_csv(ROOT / "benchmarks" / "calibration" / "headroom.csv", index=False)
    u = df.drop_duplicates(["shape", "status"])
    kinds = {"failed to allocate": u[u.status == "failed"],
             "compiled, not opt2's": u[(u.status == "compiled") & ~u["opt2's"]],
             "compiled, opt2's (exempt in the search)": u[(u.status == "compiled") & u["opt2's"]]}
    print("distinct groups the rule would refuse (refused / all):")
    for name in RULES:
        print(f"  {name:20s} " + "; ".join(f"{k}: {(~v[name]).sum()} / {len(v)}" for k, v in kinds.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

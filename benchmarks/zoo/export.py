"""Export the zoo (``models.py``) to ONNX with random weights: each case as ``ID.onnx`` (full) and
``ID.weightless.onnx`` (every initializer's data stripped), and ``manifest.csv`` saying how each went.

    /work/peer/venv/bin/python benchmarks/zoo/export.py OUT_DIR [--only a,b] [--force] [--ir-cap N]

Runs with TPU-MLIR's Python (torch, torchvision and timm are there; lgopt is not imported).  The dynamo
exporter needs onnxscript, which TPU-MLIR's environment lacks and must not get (it pins onnx 1.14.1 and
protobuf 3.20.3, onnxscript wants newer ones): ``benchmarks/zoo/exporters.sh DIR`` installs it into a folder of
its own, and ``PYTHONPATH=DIR`` puts it in front for this script only.  Without it every dynamo case fails as
``export:no-onnxscript``.

Nothing is downloaded: torchvision models are built with ``weights=None`` (and ``weights_backbone=None``), timm's
with ``pretrained=False``, after ``torch.manual_seed(0)``.  A case that fails is a row of the manifest with its
cause (``export:build``, ``export:refused``, ``export:no-onnxscript``, ``export:strip``) and its error in one
line; the run goes on.  ``opset_written`` is the opset the file declares.  The dynamo exporter of torch 2.11
builds opset 18 and converts down, and that conversion fails on every model tried (onnx's converter does not
drop ReduceMean's ``noop_with_empty_axes``), so it keeps 18: which TPU-MLIR 1.30.2's front end refuses for
ReduceMean ("Unsupport opset for ReduceMean").  export.py then converts the written file itself
(:func:`down_convert`; ``--no-convert`` keeps the exporter's); onnx has no adapter below 14 for Add and Mul, so a
dynamo case asking for 13 mostly stays at 18.  The manifest's ``note`` says what happened.
Cases whose files and ``ok`` row exist are skipped unless ``--force``.  Each case's exporter output is in
``OUT_DIR/logs/ID.export.log``.

``--ir-cap N`` rewrites the file's IR version to at most N (TPU-MLIR 1.30.2's onnx 1.14.1 reads up to 9; the
dynamo exporter writes 10, which adds only types these models do not use); off by default, the manifest
records what was written.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch
from models import Case, by_id, cases

FIELDS = ("id", "model", "source", "constructor", "family", "part", "deploy_form", "held_out", "exporter",
          "opset", "opset_written", "ir_version", "batch", "input_size", "status", "error_class", "error", "note",
          "seconds", "onnx_mb", "weightless_kb", "nodes")


def build(case: Case):
    """The model of ``case`` with random weights, in eval mode, wrapped to return plain tensors."""
    e = case.entry
    torch.manual_seed(0)
    if e.source == "timm":
        import timm

        m = timm.create_model(e.constructor, pretrained=False)
        if e.deploy_form:
            from timm.utils.model import reparameterize_model

            m = reparameterize_model(m)
    else:
        import torchvision.models as tvm

        kwargs: dict[str, object] = {"weights": None}
        if e.family in ("detection", "segmentation"):
            kwargs["weights_backbone"] = None
        if e.family == "segmentation":
            kwargs["aux_loss"] = False
        if e.constructor in ("googlenet", "inception_v3"):
            kwargs["aux_logits"] = False
            kwargs["init_weights"] = True
        m = tvm.get_model(e.constructor, **kwargs)
    m.eval()
    if e.family == "segmentation" and e.source == "torchvision":
        return _Out(m)
    if e.part == "head":
        return _Head(m)
    return m


class _Out(torch.nn.Module):
    """A torchvision segmentation model's ``out`` tensor."""

    def __init__(self, m) -> None:
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


class _Head(torch.nn.Module):
    """A torchvision detector without its transform and post-processing: backbone (+FPN), then the raw head
    outputs (SSD, RetinaNet, FCOS: the head; Faster R-CNN: the region-proposal head, the ROI heads needing
    proposals picked on the host)."""

    def __init__(self, m) -> None:
        super().__init__()
        self.m = m

    def forward(self, x):
        feats = self.m.backbone(x)
        feats = list(feats.values()) if isinstance(feats, dict) else [feats]
        if hasattr(self.m, "rpn"):
            objectness, deltas = self.m.rpn.head(feats)
            return tuple(objectness) + tuple(deltas)
        out = self.m.head(feats)
        return tuple(out[k] for k in sorted(out))


def strip(src: Path, dst: Path) -> None:
    """``src`` with every weight's data replaced by a reference to a file that does not exist.  Integer
    initializers are kept: they are the graph's structure (a ReduceMean's axes, a Reshape's shape at opset 18),
    not weights, and a file without them does not say what it computes (the legacy exporter puts them in Constant
    nodes, which stripping never touched)."""
    import onnx
    from onnx import TensorProto

    m = onnx.load(str(src))
    for init in m.graph.initializer:
        if init.data_type in (TensorProto.INT64, TensorProto.INT32):
            continue
        init.ClearField("raw_data")
        for f in ("float_data", "int32_data", "int64_data", "double_data"):
            init.ClearField(f)
        init.data_location = TensorProto.EXTERNAL
        del init.external_data[:]
        e = init.external_data.add()
        e.key, e.value = "location", "weights.absent.bin"
    onnx.save(m, str(dst))


def _one_line(e: BaseException) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text[:300]


@contextlib.contextmanager
def _quiet(log: Path):
    """Everything the exporter prints (Python and C++ alike) goes to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def down_convert(path: Path, opset: int) -> tuple[int, str]:
    """Convert the ONNX file at ``path`` down to ``opset`` in place (onnx's version converter, after dropping the
    ``noop_with_empty_axes=0`` attributes it does not know to remove from Reduce ops): (opset now written,
    why not converted or "")."""
    import onnx
    from onnx import version_converter

    m = onnx.load(str(path))
    now = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    for n in m.graph.node:
        if n.op_type.startswith("Reduce"):
            keep = [a for a in n.attribute if not (a.name == "noop_with_empty_axes" and a.i == 0)]
            del n.attribute[:]
            n.attribute.extend(keep)
    try:
        c = version_converter.convert_version(m, opset)
        onnx.checker.check_model(c)
    except Exception as err:  # noqa: BLE001 - the exporter's file is kept
        return now, _one_line(err)[:160]
    onnx.save(c, str(path))
    return opset, ""


def export_case(case: Case, out: Path, ir_cap: int | None, convert: bool = True) -> dict[str, object]:
    """Export one case; its manifest row."""
    import onnx

    e, v = case.entry, case.variant
    row: dict[str, object] = {
        "id": case.id, "model": e.name, "source": e.source, "constructor": e.constructor, "family": e.family,
        "part": e.part, "deploy_form": e.deploy_form, "held_out": e.held_out, "exporter": v.exporter,
        "opset": v.opset, "batch": v.batch, "input_size": e.input_size, "status": "failed", "error_class": "",
        "error": "", "note": ""}
    full, light = out / f"{case.id}.onnx", out / f"{case.id}.weightless.onnx"
    for p in (full, light, out / f"{case.id}.onnx.data"):
        p.unlink(missing_ok=True)
    t0 = time.perf_counter()
    log = out / "logs" / f"{case.id}.export.log"
    stage = "export:build"
    try:
        with _quiet(log):
            model = build(case)
            x = torch.randn(v.batch, 3, e.input_size, e.input_size)
            stage = "export:refused"
            if v.exporter == "dynamo":
                try:
                    import onnxscript  # noqa: F401
                except ImportError as err:
                    stage = "export:no-onnxscript"
                    raise ImportError("the dynamo exporter needs onnxscript: benchmarks/zoo/exporters.sh DIR, "
                                      "then PYTHONPATH=DIR") from err
                torch.onnx.export(model, (x,), str(full), dynamo=True, opset_version=v.opset, external_data=False,
                                  input_names=["input"])
            else:
                torch.onnx.export(model, (x,), str(full), dynamo=False, opset_version=v.opset, input_names=["input"])
            stage = "export:strip"
            m = onnx.load(str(full), load_external_data=False)
            written = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
            row.update(opset_written=written, ir_version=m.ir_version, nodes=len(m.graph.node))
            if written != v.opset and convert:
                written, why = down_convert(full, v.opset)
                row["note"] = (f"the exporter wrote opset {row['opset_written']}, converted to {v.opset} by export.py"
                               if not why else f"the exporter wrote opset {written}; converting to {v.opset} "
                               f"failed too ({why})")
                m = onnx.load(str(full), load_external_data=False)
                row.update(opset_written=written, nodes=len(m.graph.node))
            elif written != v.opset:
                row["note"] = f"opset {v.opset} asked, {written} written (the exporter's down-conversion failed)"
            if ir_cap is not None and m.ir_version > ir_cap:
                m = onnx.load(str(full))
                m.ir_version = ir_cap
                onnx.save(m, str(full))
                row["note"] = (str(row["note"]) + "; " if row["note"] else "") + f"IR {row['ir_version']} -> {ir_cap}"
                row["ir_version"] = ir_cap
            strip(full, light)
        row.update(status="ok", onnx_mb=round(full.stat().st_size / 2**20, 1),
                   weightless_kb=round(light.stat().st_size / 2**10, 1))
    except Exception as err:  # noqa: BLE001 - a failed export is a row, not a crash
        row.update(error_class=stage, error=_one_line(err))
        with open(log, "a") as f:
            traceback.print_exc(file=f)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def read_manifest(path: Path) -> dict[str, dict[str, str]]:
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def write_manifest(path: Path, rows: dict[str, dict[str, object]]) -> None:
    order = {c.id: i for i, c in enumerate(cases())}
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, extrasaction="ignore")
        w.writeheader()
        for k in sorted(rows, key=lambda k: order.get(k, len(order))):
            w.writerow(rows[k])
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder for the ONNX files and manifest.csv")
    ap.add_argument("--only", help="comma-separated case ids or model names (default: every case)")
    ap.add_argument("--force", action="store_true", help="export again cases already exported")
    ap.add_argument("--ir-cap", type=int, help="write IR version at most N (TPU-MLIR 1.30.2 reads up to 9)")
    ap.add_argument("--no-convert", action="store_true",
                    help="keep the exporter's opset where it wrote another than asked (default: convert down)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    todo = list(cases())
    if args.only:
        want = {w.strip() for w in args.only.split(",") if w.strip()}
        unknown = want - set(by_id()) - {c.entry.name for c in todo}
        if unknown:
            ap.error(f"--only: no such case or model: {', '.join(sorted(unknown))}")
        todo = [c for c in todo if c.id in want or c.entry.name in want]
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = args.out / "manifest.csv"
    rows: dict[str, dict[str, object]] = dict(read_manifest(manifest))
    for c in todo:
        old = rows.get(c.id)
        if (not args.force and old and old.get("status") == "ok" and (args.out / f"{c.id}.onnx").exists()
                and (args.out / f"{c.id}.weightless.onnx").exists()):
            print(f"{c.id}: exported already", flush=True)
            continue
        row = export_case(c, args.out, args.ir_cap, not args.no_convert)
        rows[c.id] = row
        write_manifest(manifest, rows)
        what = "ok" if row["status"] == "ok" else f"{row['error_class']}: {row['error']}"
        print(f"{c.id} ({c.variant.tag}): {what} [{row['seconds']} s]{' - ' + str(row['note']) if row['note'] else ''}",
              flush=True)
    failed = sum(1 for r in rows.values() if r.get("status") != "ok")
    print(f"{len(rows)} cases in {manifest}, {failed} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

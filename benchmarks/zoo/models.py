"""The model zoo of issue 37, as data: which architectures are exported, how, and which are held out.

Each :class:`Entry` is one architecture from torchvision or timm, built with random weights (nothing is
downloaded).  Each is exported once at batch 1 with one *variant* (exporter ``legacy`` = TorchScript or
``dynamo``, an ONNX opset from 13 to 18), the variants rotated over the list so that every exporter, every opset
and every exporter/opset pair occurs; a few entries (:data:`BATCH4`) are exported a second time at batch 4 with
another variant.  A :class:`Case` is one such (entry, variant) pair: the unit the benchmark runs.

The rotation follows the position in :data:`ZOO`: append new entries at the end, never reorder, or every
variant after the change moves.

**Held-out entries** (``held_out=True``, a quarter of the zoo, chosen once, spread over the families, and none of
them a model the project had touched when they were chosen: not in ``../shared/calibration``, not in the tests,
docs or problems, not among the models of the import fixes of the day) **must never be used to tune lgopt's
rules or fits**: no cost-model fit (``lgopt fit``), no calibration constant, no importer, grouping or allocation
rule may be made or adjusted by looking at their results.  They are reported apart (``run.py``), so that the
zoo says how lgopt does on models nobody tuned it for.  Where a held-out model fails, fix the cause on the other
models showing it, or add a new, non-held-out entry that shows it; to use a held-out model for tuning, first
move it out of the held-out set and say so in the results.

``part`` says what of the model is exported: ``full`` (the model's forward; a segmentation model's ``out``
tensor) or ``head`` for detection: backbone, neck and the raw head outputs, without anchor decoding and
non-maximum suppression (the part a TPU runs; post-processing stays on the host).  ``deploy_form`` entries are
re-parameterised (``timm.utils.reparameterize_model``) before export, as they would be deployed; the others of the
``reparam`` family are exported in their training form (multi-branch).

``python benchmarks/zoo/models.py`` prints the cases and checks the coverage.
"""

from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("classic", "mobile", "detection", "segmentation", "reparam", "attention", "hybrid")
EXPORTERS = ("legacy", "dynamo")  # torch.onnx.export(dynamo=False) (TorchScript) | dynamo=True (torch.export)
OPSETS = (13, 14, 15, 16, 17, 18)
BATCHES = (1, 4)


@dataclass(frozen=True)
class Entry:
    """One architecture: ``constructor`` is torchvision's builder name (``torchvision.models`` or its
    ``segmentation``/``detection`` packages) or timm's model name."""

    name: str
    source: str  # torchvision | timm
    constructor: str
    family: str  # one of FAMILIES
    input_size: int = 224  # square H = W
    held_out: bool = False
    part: str = "full"  # full | head (detection without post-processing)
    deploy_form: bool = False  # re-parameterised before export


@dataclass(frozen=True)
class Variant:
    exporter: str  # legacy | dynamo
    opset: int  # 13..18
    batch: int  # 1 | 4

    @property
    def tag(self) -> str:
        return f"{self.exporter}-o{self.opset}-b{self.batch}"


@dataclass(frozen=True)
class Case:
    """One export of one entry: the files are ``ID.onnx`` and ``ID.weightless.onnx``."""

    entry: Entry
    variant: Variant

    @property
    def id(self) -> str:
        return self.entry.name if self.variant.batch == 1 else f"{self.entry.name}_b{self.variant.batch}"


def _tv(name: str, family: str, size: int = 224, held_out: bool = False, part: str = "full") -> Entry:
    return Entry(name, "torchvision", name, family, size, held_out, part)


def _timm(name: str, family: str, size: int = 224, held_out: bool = False, constructor: str = "",
          deploy_form: bool = False) -> Entry:
    return Entry(name, "timm", constructor or name, family, size, held_out, "full", deploy_form)


ZOO: tuple[Entry, ...] = (
    # classic convolutional networks
    _tv("resnet18", "classic"),
    _tv("resnet50", "classic"),
    _tv("squeezenet1_1", "classic"),
    _tv("densenet121", "classic"),
    _tv("googlenet", "classic", held_out=True),
    _tv("inception_v3", "classic", 299),
    _tv("resnext50_32x4d", "classic"),
    _tv("regnet_x_400mf", "classic"),
    _timm("dla34", "classic", held_out=True),
    _tv("convnext_tiny", "classic"),
    # mobile
    _tv("mobilenet_v2", "mobile"),
    _tv("mobilenet_v3_small", "mobile"),
    _tv("mobilenet_v3_large", "mobile"),
    _tv("efficientnet_b0", "mobile"),
    _tv("mnasnet1_0", "mobile"),
    _tv("shufflenet_v2_x1_0", "mobile"),
    _timm("ghostnet_100", "mobile"),
    _timm("mobilenetv4_conv_small", "mobile", held_out=True),
    _timm("mixnet_s", "mobile", held_out=True),
    _timm("lcnet_050", "mobile"),
    # detection: backbone + neck + raw head outputs
    _tv("ssdlite320_mobilenet_v3_large", "detection", 320, part="head"),
    _tv("fcos_resnet50_fpn", "detection", 320, held_out=True, part="head"),
    _tv("retinanet_resnet50_fpn", "detection", 320, part="head"),
    _tv("fasterrcnn_mobilenet_v3_large_320_fpn", "detection", 320, part="head"),
    # segmentation
    _tv("deeplabv3_mobilenet_v3_large", "segmentation"),
    _tv("lraspp_mobilenet_v3_large", "segmentation", held_out=True),
    _tv("fcn_resnet50", "segmentation"),
    _tv("deeplabv3_resnet50", "segmentation"),
    # re-parameterisable (training form unless deploy_form)
    _timm("repvgg_a0", "reparam"),
    _timm("repvgg_a0_deploy", "reparam", constructor="repvgg_a0", deploy_form=True),
    _timm("mobileone_s0", "reparam", held_out=True),
    _timm("repghostnet_050", "reparam", held_out=True),
    _timm("repvit_m0_9", "reparam"),
    # attention
    _timm("vit_tiny_patch16_224", "attention"),
    _timm("deit_tiny_patch16_224", "attention", held_out=True),
    _tv("swin_t", "attention"),
    _timm("pvt_v2_b0", "attention"),
    _timm("levit_128s", "attention"),
    _timm("xcit_nano_12_p16_224", "attention", held_out=True),
    _tv("vit_b_16", "attention"),
    # hybrid convolution + attention
    _timm("mobilevit_xxs", "hybrid", 256),
    _timm("mobilevitv2_050", "hybrid", 256),
    _timm("efficientvit_b0", "hybrid"),
    _tv("maxvit_t", "hybrid"),
    _timm("edgenext_xx_small", "hybrid", 256, held_out=True),
    _timm("efficientformerv2_s0", "hybrid"),
    _timm("tiny_vit_5m_224", "hybrid", held_out=True),
    _timm("fastvit_t8", "hybrid", 256),
)

HELD_OUT: tuple[str, ...] = tuple(e.name for e in ZOO if e.held_out)  # what every fit and rule must leave out

# exported a second time at batch 4 (another variant): one or two per kind of graph, one held out
BATCH4 = ("resnet18", "mobilenet_v2", "deeplabv3_mobilenet_v3_large", "repvgg_a0_deploy", "vit_tiny_patch16_224",
          "mobilevit_xxs", "googlenet")


def _variant(i: int, batch: int) -> Variant:
    """Entry ``i``'s variant: the opset cycles through 13..18 and the exporter alternates, its phase flipping
    every six entries, so every family mixes both exporters and any twelve consecutive entries hold every
    exporter/opset pair; batch 4 takes the other exporter and an opset half a cycle on."""
    flip = i + i // len(OPSETS)
    if batch == 1:
        return Variant(EXPORTERS[flip % 2], OPSETS[i % len(OPSETS)], 1)
    return Variant(EXPORTERS[(flip + 1) % 2], OPSETS[(i + 3) % len(OPSETS)], batch)


def cases() -> tuple[Case, ...]:
    """Every (entry, variant) pair, in zoo order, each entry's batch-4 case right after its batch-1 case."""
    out: list[Case] = []
    for i, e in enumerate(ZOO):
        out.append(Case(e, _variant(i, 1)))
        if e.name in BATCH4:
            out.append(Case(e, _variant(i, 4)))
    return tuple(out)


def by_id() -> dict[str, Case]:
    return {c.id: c for c in cases()}


def check() -> list[str]:
    """What is wrong with the zoo's coverage (empty: nothing)."""
    bad: list[str] = []
    names = [e.name for e in ZOO]
    if len(set(names)) != len(names):
        bad.append("duplicate names")
    if len(ZOO) < 40:
        bad.append(f"{len(ZOO)} entries, fewer than 40")
    for e in ZOO:
        if e.family not in FAMILIES or e.source not in ("torchvision", "timm") or e.part not in ("full", "head"):
            bad.append(f"{e.name}: bad family, source or part")
    held = [e for e in ZOO if e.held_out]
    if not 0.2 <= len(held) / len(ZOO) <= 0.3:
        bad.append(f"{len(held)} of {len(ZOO)} held out: not about a quarter")
    missing = sorted(set(FAMILIES) - {e.family for e in held})
    if missing:
        bad.append(f"no held-out entry in {', '.join(missing)}")
    vs = [c.variant for c in cases()]
    pairs = {(v.exporter, v.opset) for v in vs}
    if len(pairs) != len(EXPORTERS) * len(OPSETS):
        bad.append(f"exporter/opset pairs: {len(pairs)} of {len(EXPORTERS) * len(OPSETS)}")
    if {v.batch for v in vs} != set(BATCHES):
        bad.append("not every batch occurs")
    if set(BATCH4) - set(names):
        bad.append(f"BATCH4 names unknown entries: {sorted(set(BATCH4) - set(names))}")
    return bad


if __name__ == "__main__":
    for c in cases():
        e = c.entry
        print(f"{c.id:40s} {e.source:11s} {e.family:12s} {e.input_size:4d} {c.variant.tag:15s}"
              f"{' held-out' if e.held_out else ''}{' head' if e.part == 'head' else ''}"
              f"{' deploy-form' if e.deploy_form else ''}")
    held = sum(e.held_out for e in ZOO)
    print(f"{len(ZOO)} entries, {len(cases())} cases, {held} held out ({held / len(ZOO):.0%})")
    problems = check()
    print("coverage: " + ("ok" if not problems else "; ".join(problems)))
    raise SystemExit(1 if problems else 0)

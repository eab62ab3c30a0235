#!/usr/bin/env python3
"""Intel's road-segmentation-adas-0001 (Open Model Zoo, Apache-2.0) in PyTorch.

The peer model ships as OpenVINO IR (`.xml` graph + `.bin` weights). OpenVINO
is a CPU wheel and the lent GPU machine has none, so this module reads the IR
itself and runs it as a small torch graph: the same arithmetic on any torch
device, batched, inside a training step (the teacher labels the very view the
student sees). `--check` compares it with OpenVINO where that is installed.

IR facts relied on (checked against the file, 2026-11-27): opset1/opset3
layers Parameter, Const (f32, i64), Convolution, GroupConvolution, Add,
Multiply, ReLU, MaxPool / AvgPool (ceil rounding, no padding), Interpolate
(bilinear, align_corners=1, target size computed in-graph from ShapeOf),
ShapeOf, StridedSlice, ceil, SoftMax, Result. The input is BGR, raw 0-255,
1x3x512x896; the output is per-pixel probabilities of background, road, curb,
lane mark.

    python3 tools/teacher/omz.py --check IMAGE [IMAGE...]   # torch vs OpenVINO
"""
from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET

import numpy as np
import torch
import torch.nn.functional as F

DEFAULT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared",
                           "models", "omz-road-segmentation-adas-0001", "FP32")
XML_NAME = "road-segmentation-adas-0001.xml"
INPUT_W, INPUT_H = 896, 512
CLASSES = ("background", "road", "curb", "mark")


def default_dir() -> str:
    """The IR folder: $ROADSEG_TEACHER_DIR, ../shared, or target/gpu-train/teacher-ir (staged for the GPU machine)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.environ.get("ROADSEG_TEACHER_DIR"),
              DEFAULT_DIR,
              os.path.join(here, "..", "..", "target", "gpu-train", "teacher-ir")):
        if d and os.path.exists(os.path.join(d, XML_NAME)):
            return os.path.normpath(d)
    raise FileNotFoundError(
        f"no {XML_NAME}: set ROADSEG_TEACHER_DIR, or put ../shared beside the checkout "
        "(models/omz-road-segmentation-adas-0001/FP32)")


def _ints(s: str | None) -> list[int]:
    return [int(v) for v in s.split(",")] if s else []


class OmzRoadSeg(torch.nn.Module):
    """The IR graph, evaluated layer by layer in topological (file) order."""

    def __init__(self, ir_dir: str | None = None):
        super().__init__()
        ir_dir = ir_dir or default_dir()
        root = ET.parse(os.path.join(ir_dir, XML_NAME)).getroot()
        blob = np.fromfile(os.path.join(ir_dir, XML_NAME.replace(".xml", ".bin")), dtype=np.uint8)
        self.layers: list[tuple[str, str, dict]] = []
        inputs: dict[str, list[tuple[int, str, str]]] = {}
        for e in root.find("edges"):
            inputs.setdefault(e.get("to-layer"), []).append(
                (int(e.get("to-port")), e.get("from-layer"), e.get("from-port")))
        self.inputs = {k: [(f, p) for _, f, p in sorted(v)] for k, v in inputs.items()}
        self.consts: dict[str, torch.Tensor] = {}
        n_param = 0
        for layer in root.find("layers"):
            lid, kind = layer.get("id"), layer.get("type")
            data = layer.find("data")
            attrs = dict(data.attrib) if data is not None else {}
            if kind == "Const":
                dtype = {"f32": np.float32, "i64": np.int64}[attrs["element_type"]]
                off, size = int(attrs["offset"]), int(attrs["size"])
                arr = blob[off:off + size].view(dtype).reshape(_ints(attrs["shape"]) or ())
                t = torch.from_numpy(arr.copy())
                if t.dtype == torch.float32:
                    name = f"c{lid}"
                    self.register_buffer(name, t, persistent=False)
                    n_param += t.numel()
                else:
                    self.consts[lid] = t
                continue
            if kind == "Parameter":
                self.input_id = lid
            if kind == "Result":
                self.output_id = self.inputs[lid][0][0]
            self.layers.append((lid, kind, attrs))
        self.num_weights = n_param
        self.eval()
        for p in self.buffers():
            p.requires_grad_(False)

    def _const(self, lid: str):
        if lid in self.consts:
            return self.consts[lid]
        return getattr(self, f"c{lid}")

    @torch.no_grad()
    def forward(self, bgr: torch.Tensor) -> torch.Tensor:
        """N x 3 x H x W BGR in 0..255 (float) -> N x 4 x H x W probabilities."""
        values: dict[str, object] = {self.input_id: bgr}

        def arg(lid: str, i: int):
            src = self.inputs[lid][i][0]
            return values[src] if src in values else self._const(src)

        for lid, kind, a in self.layers:
            if kind in ("Parameter", "Result"):
                continue
            if kind == "Convolution" or kind == "GroupConvolution":
                x, w = arg(lid, 0), arg(lid, 1)
                groups = 1
                if kind == "GroupConvolution":
                    g, o, i, kh, kw = w.shape  # G x O/G x I/G x kh x kw -> (G*O/G) x I/G x kh x kw
                    w = w.reshape(g * o, i, kh, kw)
                    groups = g
                pb, pe = _ints(a["pads_begin"]), _ints(a["pads_end"])
                if pb != pe:
                    x = F.pad(x, (pb[1], pe[1], pb[0], pe[0]))
                    pad = 0
                else:
                    pad = tuple(pb)
                values[lid] = F.conv2d(x, w, None, tuple(_ints(a["strides"])), pad,
                                       tuple(_ints(a["dilations"])), groups)
            elif kind == "Add":
                values[lid] = arg(lid, 0) + arg(lid, 1)
            elif kind == "Multiply":
                values[lid] = arg(lid, 0) * arg(lid, 1)
            elif kind == "ReLU":
                values[lid] = F.relu(arg(lid, 0))
            elif kind in ("MaxPool", "AvgPool"):
                x = arg(lid, 0)
                assert _ints(a["pads_begin"]) == [0, 0] and _ints(a["pads_end"]) == [0, 0], a
                k, s = tuple(_ints(a["kernel"])), tuple(_ints(a["strides"]))
                ceil = a.get("rounding_type", "floor") == "ceil"
                if kind == "MaxPool":
                    values[lid] = F.max_pool2d(x, k, s, ceil_mode=ceil)
                else:
                    values[lid] = F.avg_pool2d(x, k, s, ceil_mode=ceil,
                                               count_include_pad=a.get("exclude-pad") != "true")
            elif kind == "ShapeOf":
                values[lid] = torch.tensor(arg(lid, 0).shape, dtype=torch.int64)
            elif kind == "StridedSlice":
                x, b, e, s = (arg(lid, i) for i in range(4))
                bm, em = _ints(a["begin_mask"]), _ints(a["end_mask"])
                # 1-D slices only here: a mask bit of 1 means "ignore the given bound".
                lo = 0 if bm and bm[0] == 1 else int(b[0])
                hi = len(x) if em and em[0] == 1 else int(e[0])
                values[lid] = x[lo:hi:int(s[0])]
            elif kind == "ceil":
                values[lid] = torch.ceil(arg(lid, 0).to(torch.float64)).to(torch.int64)
            elif kind == "Interpolate":
                x, size = arg(lid, 0), arg(lid, 1)
                assert a["mode"] == "linear" and _ints(a["axes"]) == [2, 3], a
                values[lid] = F.interpolate(x, size=(int(size[0]), int(size[1])), mode="bilinear",
                                            align_corners=a["align_corners"] == "1")
            elif kind == "SoftMax":
                values[lid] = torch.softmax(arg(lid, 0), dim=int(a["axis"]))
            else:
                raise NotImplementedError(f"IR layer type {kind} (layer {lid})")
        return values[self.output_id]


def rgb_to_input(rgb: torch.Tensor) -> torch.Tensor:
    """N x 3 x H x W RGB (0..255 float, any size) -> the teacher's 896x512 BGR input."""
    x = rgb.flip(1)
    if x.shape[-2:] != (INPUT_H, INPUT_W):
        x = F.interpolate(x, size=(INPUT_H, INPUT_W), mode="bilinear", align_corners=False)
    return x


def road_probability(model: OmzRoadSeg, rgb: torch.Tensor, size: tuple[int, int] | None = None) -> torch.Tensor:
    """P(road surface) = P(road) + P(mark), N x H x W, at `size` (default the input's)."""
    p = model(rgb_to_input(rgb))
    road = p[:, 1] + p[:, 3]
    size = size or tuple(rgb.shape[-2:])
    if tuple(road.shape[-2:]) != tuple(size):
        road = F.interpolate(road[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]
    return road


def _load_rgb(path: str) -> torch.Tensor:
    from PIL import Image
    im = np.asarray(Image.open(path).convert("RGB"), dtype=np.float32)
    return torch.from_numpy(im).permute(2, 0, 1)[None]


def _check(paths: list[str]) -> int:
    import openvino as ov
    ir = default_dir()
    core = ov.Core()
    # f32 asked for: on CPUs with AVX512-BF16 or AMX, OpenVINO's default is bf16
    # arithmetic (max |diff| 0.15 in probability against f32 on a BDD frame).
    compiled = core.compile_model(core.read_model(os.path.join(ir, XML_NAME)), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    model = OmzRoadSeg(ir)
    print(f"IR {ir}: {model.num_weights} weights")
    worst = 0.0
    for path in paths:
        x = rgb_to_input(_load_rgb(path))
        ref = compiled([x.numpy()])[0]
        got = model(x).numpy()
        diff = float(np.abs(ref - got).max())
        agree = float((ref.argmax(1) == got.argmax(1)).mean())
        worst = max(worst, diff)
        print(f"{path}: max |p_torch - p_openvino| {diff:.2e}, argmax agreement {agree:.6f}")
    ok = worst < 1e-3
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", nargs="+", metavar="IMAGE", help="compare with OpenVINO on these images")
    args = ap.parse_args()
    if args.check:
        sys.exit(_check(args.check))
    ap.print_help()

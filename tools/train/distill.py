#!/usr/bin/env python3
"""Train the product model (issue 35): real labels where they exist, Intel's
road-segmentation-adas-0001 as the teacher where they do not, a learned ego
vehicle, one label set for every source.

Label set (the model's id2label, in this order):
  0 road         the drivable surface, lane marks included
  1 sidewalk     non-drivable ground: pavement, kerbs, rough verges
  2 vehicle      cars, trucks, buses, two-wheelers (CamVid car, IDD vehicles)
  3 person       people and riders (CamVid pedestrian, bicyclist; IDD living things, animals too)
  4 sky
  5 ego_vehicle  the camera car's own bonnet, dashboard and mounts
  6 other        buildings, vegetation, poles, signs, fences, walls, far objects

Sources, each a share of every batch (--mix):
  camvid   ../shared CamVid train, 11 classes mapped
  idd      IDD Lite train less the held-out drives (tools/train/splits.py), 7 classes mapped
  teacher  frames without labels (tools/teacher/label.py): the teacher's soft P(road)
           on the clean frame; the ego vehicle drawn for its camera
           (tools/teacher/ego-outlines.json) overrides it
  synth    `roadseg synth` frames: road, not road, and its bonnet as ego
  selftrain  teacher frames relabelled where a trained student's five neighbouring
           frames agree and the teacher was unsure (tools/teacher/selftrain.py)
  egoframes  the training cameras' frames with their drawn bonnets in place, scored on
           ego vehicle or not only (NOT_EGO elsewhere)

Label maps are uint8 in that set, plus 100..200 = the teacher's P(road) in
percent (class otherwise unknown), 253 = not the ego vehicle (class
unknown), 254 = not road (class unknown), 255 = not scored. Real labels
win: a labelled frame never takes the teacher's.
The loss is cross-entropy on class labels, and on the road-or-not split of
the softmax for soft and not-road pixels (binary cross-entropy against the
teacher's probability).

Augmentation: tools/train/augment.py's road scenes (night, dusk, sodium
light, glare, haze, camera roll, bars, blur and codec, re-toned surfaces,
skies, synthetic bonnets and dashboards, labelled ego) plus real ego
vehicles cut from other cameras and pasted along the bottom, then scale,
crop, flip, colour jitter, and CutMix between two frames of a batch. The
geometry moves image and labels alike; light changes only the image, so at
night the student is held to the road the teacher found by day.

Resumable: OUT/state.pt holds the weights, the optimiser and the step every
--save-every-min; run the same command again to go on. The LR schedule is
by step (--steps) and, with --time-budget-min, by the wall-clock time spent
(kept in state.pt across resumes), so a resumed run is the same run. Every --val-every
steps: road IoU on CamVid val and the held-out IDD drives (the daemon's
preprocessing, 1024 wide, plain argmax), logged, and the weights exported
as OUT/step-NNNNNN (float16 HF folder, the daemon's format).

  python3 tools/train/distill.py --out target/runs/p1 --init-from models/roadseg-camvid --steps 6000
"""
from __future__ import annotations

import argparse
import copy
import fnmatch
import glob
import json
import math
import os
import random
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import augment  # noqa: E402
import splits  # noqa: E402
import train as base  # noqa: E402  (model presets, export, the daemon's preprocessing)

CLASSES = ["road", "sidewalk", "vehicle", "person", "sky", "ego_vehicle", "other"]
ROAD, SIDEWALK, VEHICLE, PERSON, SKY, EGO, OTHER = range(7)
N = len(CLASSES)
SOFT_LO, SOFT_HI = 100, 200
NOT_ROAD, IGNORE = 254, 255
# The egoframes source: a real camera's frame with its bonnet in place, scored only on
# ego vehicle or not (binary_ego_loss); its street carries no class.
NOT_EGO = 253
# --idd-road-channel: IDD's pixels carry IDD_BASE + class after augmentation, and their
# cross-entropy reads road from an extra output channel ("road_idd", at N), so that
# IDD's wider "drivable" does not pull the product's road border (CamVid's) outward.
IDD_BASE = 20
# --teacher-road-channel: the teacher's and the synthetic frames' road-or-not (soft
# P(road) in 2% steps, TEACHER_LO..TEACHER_HI; TEACHER_NOT_ROAD) is scored on another
# extra channel, "road_teacher", for the same reason (p12-plan.md: their road moves
# CamVid's border). The uint8 labels have no room for a second 100..200 range.
TEACHER_LO, TEACHER_HI, TEACHER_NOT_ROAD = 30, 80, 81
TEACHER_SOURCES = ("teacher", "synth", "selftrain")


def extra_channels(args) -> list[str]:
    """The training-only outputs after the product's N, in order."""
    return ((["road_idd"] if getattr(args, "idd_road_channel", False) else [])
            + (["road_teacher"] if getattr(args, "teacher_road_channel", False) else []))


def confident_only(lab: np.ndarray, confident: float, unsure=IGNORE) -> np.ndarray:
    """Soft road labels (SOFT_LO + 100 P) whose P is strictly between 1 - `confident` and
    `confident` become `unsure` (IGNORE; NOT_EGO on a frame known to show no ego vehicle
    there): the teacher's unsure band, its road's edges."""
    soft = (lab >= SOFT_LO) & (lab <= SOFT_HI)
    p = (lab.astype(np.int32) - SOFT_LO) / 100.0
    unsure_band = soft & (p > 1 - confident + 1e-9) & (p < confident - 1e-9)
    return np.where(unsure_band, unsure, lab).astype(np.uint8)


def teacher_codes(lab: np.ndarray) -> np.ndarray:
    """A teacher or synthetic frame's road-or-not labels moved to the teacher channel's codes."""
    out = lab.copy()
    soft = (lab >= SOFT_LO) & (lab <= SOFT_HI)
    out[soft] = TEACHER_LO + np.round((lab[soft].astype(np.float32) - SOFT_LO) / 2).astype(np.uint8)
    out[lab == NOT_ROAD] = TEACHER_NOT_ROAD
    out[lab == ROAD] = TEACHER_HI  # the synthetic drive's hard road: P(road) = 1
    return out

# CamVid: sky building pole road pavement tree sign fence car pedestrian bicyclist (11 unlabelled)
CAMVID_TO = [SKY, OTHER, OTHER, ROAD, SIDEWALK, OTHER, OTHER, OTHER, VEHICLE, PERSON, PERSON, IGNORE]
# IDD Lite: drivable, non-drivable, living things, vehicles, road-side objects, far objects, sky
IDD_TO = [ROAD, SIDEWALK, PERSON, VEHICLE, OTHER, OTHER, SKY]
# The bundled CamVid model's classifier rows that start each new class.
INIT_ROWS = {ROAD: [3], SIDEWALK: [4], VEHICLE: [8], PERSON: [9, 10], SKY: [0], EGO: [8],
             OTHER: [1, 2, 5, 6, 7]}

SHARED = os.environ.get("ROADSEG_SHARED", os.path.join(ROOT, "..", "shared"))
DATA = os.path.join(ROOT, "target", "train-data")


def log(msg: str, fh) -> None:
    base.log(msg, fh)


def lut(mapping: list[int]) -> np.ndarray:
    t = np.full(256, IGNORE, np.uint8)
    t[: len(mapping)] = mapping
    return t


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------

def shrink(im: Image.Image, lab: np.ndarray, width: int) -> tuple[Image.Image, np.ndarray]:
    """At most `width` wide: the daemon's input is 1024 wide, and smaller
    frames augment faster."""
    if im.width <= width:
        return im, lab
    h = round(im.height * width / im.width)
    return im.resize((width, h), Image.BILINEAR), np.asarray(Image.fromarray(lab).resize((width, h), Image.NEAREST))


def load_camvid(root: str, split: str, repeat: dict | None = None) -> list:
    """`repeat` maps a file-name prefix (a CamVid sequence: 0001TP is the
    dusk drive) to how many times its frames are in the pool."""
    t = lut(CAMVID_TO)
    out = []
    for p in sorted(glob.glob(os.path.join(root, split, "*.jpg")) + glob.glob(os.path.join(root, split, "*.png"))):
        stem = os.path.splitext(os.path.basename(p))[0]
        lab = np.asarray(Image.open(os.path.join(root, split + "annot", stem + ".png")))
        times = max((k for prefix, k in (repeat or {}).items() if stem.startswith(prefix)), default=1)
        out += [(Image.open(p).convert("RGB"), t[lab])] * times
    return out


def load_idd(root: str, held_out: bool, teacher_dir: str | None = None, teacher_min: float = 0.0) -> list:
    """IDD Lite frames. With `teacher_min` > 0, drivable pixels where the
    teacher's P(road) (`teacher_dir`, tools/teacher/label.py --idd) is below
    it are not scored: IDD's "drivable" takes in shoulders, aprons and paved
    pedestrian areas that CamVid calls pavement, and that conflict pulled
    CamVid's pavement into road in runs p1-p6."""
    t = lut(IDD_TO)
    out = []
    disputed = total = 0
    for p in sorted(glob.glob(os.path.join(root, "train", "images", "*.jpg"))):
        if splits.idd_held_out(p) != held_out:
            continue
        stem = os.path.splitext(os.path.basename(p))[0]
        lab = t[np.asarray(Image.open(os.path.join(root, "train", "labels", stem + ".png")))]
        im = Image.open(p).convert("RGB")
        if teacher_min > 0:
            road_p = Image.open(os.path.join(teacher_dir, stem + ".png")).resize(im.size, Image.BILINEAR)
            drop = (lab == ROAD) & (np.asarray(road_p, np.float32) / 255 < teacher_min)
            disputed += int(drop.sum())
            total += int((lab == ROAD).sum())
            lab = np.where(drop, IGNORE, lab).astype(np.uint8)
        out.append((im, lab))
    if teacher_min > 0:
        print(f"idd: {disputed / max(total, 1):.1%} of drivable pixels unscored (teacher P(road) < {teacher_min})")
    return out


def ego_outlines() -> dict:
    sys.path.insert(0, os.path.join(ROOT, "tools", "teacher"))
    import ego
    return ego, {k: v for k, v in ego.outlines().items() if v["split"] == "train"}


def load_teacher(root: str, width: int, only=(), leave_out=()) -> list:
    """`only` / `leave_out`: substrings of the frames' source paths to keep / drop."""
    ego, outlines = ego_outlines()
    rows = [l.split("\t") for l in open(os.path.join(root, "index.tsv")).read().splitlines()[1:]]
    out = []
    for name, source, *_ in rows:
        if splits.never_trains(source):  # belt and braces: label.py leaves them out already
            continue
        if (only and not any(k in source for k in only)) or any(k in source for k in leave_out):
            continue
        im = Image.open(os.path.join(root, "img", name + ".jpg")).convert("RGB")
        p = Image.open(os.path.join(root, "road", name + ".png")).resize(im.size, Image.BILINEAR)
        lab = (SOFT_LO + np.round(np.asarray(p, np.float32) / 255 * 100)).astype(np.uint8)
        for o in outlines.values():
            if fnmatch.fnmatch(source, o["frames"]):
                m = ego.outline_mask(o, im.width, im.height)
                lab[m == ego.EGO] = EGO
                lab[m == ego.BARS] = IGNORE
        out.append(shrink(im, lab, width))
    return out


def load_synth(root: str) -> list:
    hood = os.path.join(root, "hood.png")
    hood = np.asarray(Image.open(hood)) > 127 if os.path.exists(hood) else None
    out = []
    for ip, mp in zip(sorted(glob.glob(os.path.join(root, "img", "*"))), sorted(glob.glob(os.path.join(root, "masks", "*.png")))):
        m = np.asarray(Image.open(mp).convert("L"))
        lab = np.where(m > 127, ROAD, NOT_ROAD).astype(np.uint8)
        if hood is not None:
            lab[hood] = EGO
        out.append((Image.open(ip).convert("RGB"), lab))
    return out


def ego_cameras(root: str):
    """(tools/teacher/ego.py, the drawn mask, its mask file, its frames) of every
    training camera staged in `root` (tools/teacher/ego.py --out)."""
    ego, outlines = ego_outlines()
    for name in outlines:
        mask_path = os.path.join(root, name + ".png")
        if os.path.exists(mask_path):
            yield ego, np.asarray(Image.open(mask_path)), mask_path, sorted(glob.glob(os.path.join(root, name, "*.jpg")))


def load_egos(root: str) -> list:
    """(frame, mask of the ego pixels) of every camera, to paste."""
    return [(Image.open(f).convert("RGB"), m == ego.EGO)
            for ego, m, _, frames in ego_cameras(root) for f in frames[::4]]


def load_ego_frames(root: str, width: int) -> list:
    """Every frame of every training camera with its drawn ego vehicle in place:
    EGO on it, NOT_EGO elsewhere, mounts and bars unscored. Pasted bonnets carry
    a seam and another street's light; these teach the bonnet under its own sky
    (p39-plan.md: stage 4 unlearned the Udacity clip's bonnet with pasted ones only)."""
    out = []
    for ego, m, mask_path, frames in ego_cameras(root):
        lab = np.where(m == ego.EGO, EGO, np.where(m == ego.BARS, IGNORE, NOT_EGO)).astype(np.uint8)
        for f in frames:
            im = Image.open(f).convert("RGB")
            if im.size[::-1] != lab.shape:
                raise SystemExit(f"{f}: {im.size[0]}x{im.size[1]}, but its camera's mask {mask_path} is "
                                 f"{lab.shape[1]}x{lab.shape[0]}: rerun tools/train/stage-data.sh")
            out.append(shrink(im, lab, width))
    return out


def paste_ego(im: Image.Image, lab: np.ndarray, egos: list, rng: random.Random):
    """A real ego vehicle from another camera along the bottom, its width the frame's."""
    src, m = egos[rng.randrange(len(egos))]
    rows = np.nonzero(m.any(axis=1))[0]
    if len(rows) == 0:
        return im, lab
    top = rows.min()
    piece = src.crop((0, top, src.width, src.height))
    pm = Image.fromarray((m[top:] * 255).astype(np.uint8))
    w, h = im.size
    ph = max(1, round(piece.height * w / src.width * rng.uniform(0.8, 1.2)))
    ph = min(ph, int(h * 0.45))
    piece, pm = piece.resize((w, ph), Image.BILINEAR), pm.resize((w, ph), Image.BILINEAR)
    if rng.random() < 0.5:
        piece, pm = piece.transpose(Image.FLIP_LEFT_RIGHT), pm.transpose(Image.FLIP_LEFT_RIGHT)
    a = np.asarray(im, np.float32).copy()
    alpha = np.asarray(pm, np.float32)[..., None] / 255
    a[h - ph:] = a[h - ph:] * (1 - alpha) + np.asarray(piece, np.float32) * alpha
    lab = lab.copy()
    lab[h - ph:][alpha[..., 0] > 0.5] = EGO
    return Image.fromarray(a.clip(0, 255).astype(np.uint8)), lab


def augment_one(im, lab, rng, args, egos, plain=False, road_augment=True, shadows=True, tunnel=True, rain=True,
                centre_line=True, barrier=True):
    """`plain`: the source's own labelled border is what is taught, so no
    bonnet or dashboard, real or drawn, covers its near road (the geometry
    and light augmentations still apply). `road_augment` False: none of
    augment.py's scene augmentations (the source is not in
    --road-augment-sources); `shadows` False: not its cast shadows (the source
    is not in --cast-shadows-sources); `tunnel` False: no drawn tunnel (not in
    --tunnel-sources); `rain` False: no drawn rain (not in --rain-sources);
    `centre_line` False: no painted centre line (not in --centre-line-sources);
    `barrier` False: no drawn roadside barrier (not in --barrier-sources)."""
    has_ego = (lab == EGO).any()
    if egos and not plain and not has_ego and rng.random() < args.ego_paste:
        im, lab = paste_ego(im, lab, egos, rng)
    if road_augment and args.road_augment > 0:
        skip = set(args.road_augment_skip)
        if plain or has_ego or (lab == EGO).any():  # one ego vehicle a frame
            skip |= {"hood", "dashboard"}
        if not shadows:
            skip |= {"cast_shadows"}
        if not tunnel:
            skip |= {"tunnel"}
        if not rain:
            skip |= {"rain"}
        if not centre_line:
            skip |= {"centre_line"}
        if not barrier:
            skip |= {"barrier"}
        im, lab = augment.random_road_augment(im, lab, rng, args.road_augment, skip)
    W, H = im.size
    cw, ch = args.crop_w, args.crop_h
    s = (args.base_width / W) * rng.uniform(args.scale_min, args.scale_max)
    sw, sh = max(1, round(W * s)), max(1, round(H * s))
    x0, y0 = rng.randint(0, max(sw - cw, 0)), rng.randint(0, max(sh - ch, 0))
    rw, rh = min(cw, sw), min(ch, sh)
    box = (x0 * W / sw, y0 * H / sh, (x0 + rw) * W / sw, (y0 + rh) * H / sh)
    im = base.color_jitter(im, rng, 0.3, 0.3, 0.3, 0.05)
    # The daemon brightens a dark frame before the model sees it (src/exposure.rs),
    # deciding on the whole frame: so does training, on the whole augmented frame.
    curve = base.exposure_curve(np.asarray(im), args.exposure_target)
    out_im = np.zeros((ch, cw, 3), np.uint8)
    out_lab = np.full((ch, cw), IGNORE, np.uint8)
    px, py = rng.randint(0, cw - rw), rng.randint(0, ch - rh)
    out_im[py:py + rh, px:px + rw] = np.asarray(im.resize((rw, rh), Image.BILINEAR, box=box))
    out_lab[py:py + rh, px:px + rw] = np.asarray(Image.fromarray(lab).resize((rw, rh), Image.NEAREST, box=box))
    if curve is not None:
        out_im = curve[out_im].astype(np.uint8)
    if rng.random() < 0.5:
        out_im, out_lab = out_im[:, ::-1], out_lab[:, ::-1]
    return out_im, out_lab


class Batches(torch.utils.data.Dataset):
    """Item k = the whole batch of step k: its randomness depends only on (seed, k).
    With --idd-road-channel, an IDD frame's class labels become IDD_BASE + class,
    and with --teacher-road-channel a teacher or synthetic frame's road-or-not
    becomes teacher_codes(), after its augmentation (which reads the plain ids)
    and before CutMix moves them."""

    def __init__(self, pools: dict, mix: dict, egos: list, args):
        self.pools, self.mix, self.egos, self.args = pools, mix, egos, args

    def __len__(self):
        return self.args.steps

    def __getitem__(self, step):
        rng = random.Random(f"{self.args.seed}-{step}")
        ims, labs, plain, no_ego = [], [], [], []
        for name, count in self.mix.items():
            pool = self.pools[name]
            is_plain = name in self.args.plain
            scene = not self.args.road_augment_sources or name in self.args.road_augment_sources
            for _ in range(count):
                im, lab = pool[rng.randrange(len(pool))]
                shadows = not self.args.cast_shadows_sources or name in self.args.cast_shadows_sources
                tunnel = not self.args.tunnel_sources or name in self.args.tunnel_sources
                rain = not self.args.rain_sources or name in self.args.rain_sources
                line = not self.args.centre_line_sources or name in self.args.centre_line_sources
                fence = not self.args.barrier_sources or name in self.args.barrier_sources
                a, b = augment_one(im, lab, rng, self.args, self.egos, is_plain, scene, shadows, tunnel, rain, line,
                                   fence)
                if name == "idd" and self.args.idd_road_channel:
                    b = np.where(b < N, b + IDD_BASE, b).astype(np.uint8)
                if name in TEACHER_SOURCES and self.args.teacher_road_channel:
                    b = teacher_codes(b)
                if name == "teacher_product" and self.args.teacher_product_confident:
                    # Where the teacher is unsure of road, the frame still says "not ego".
                    b = confident_only(b, self.args.teacher_product_confident,
                                       NOT_EGO if self.args.teacher_product_no_ego else IGNORE)
                ims.append(a)
                labs.append(b)
                plain.append(is_plain)
                no_ego.append(name == "teacher_product" and self.args.teacher_product_no_ego)
        n = len(ims)
        for i in range(n):  # CutMix: a box of another frame of the batch, labels and all
            if rng.random() < self.args.cutmix and not plain[i]:
                j = rng.randrange(n)
                ch, cw = labs[i].shape
                bw, bh = int(cw * rng.uniform(0.2, 0.5)), int(ch * rng.uniform(0.2, 0.5))
                x0, y0 = rng.randrange(cw - bw), rng.randrange(ch - bh)
                ims[i] = ims[i].copy()
                labs[i] = labs[i].copy()
                ims[i][y0:y0 + bh, x0:x0 + bw] = ims[j][y0:y0 + bh, x0:x0 + bw]
                labs[i][y0:y0 + bh, x0:x0 + bw] = labs[j][y0:y0 + bh, x0:x0 + bw]
        x = torch.from_numpy(np.ascontiguousarray(np.stack(ims))).permute(0, 3, 1, 2).contiguous()
        y = torch.from_numpy(np.ascontiguousarray(np.stack(labs)))
        return x, y, torch.tensor(no_ego, dtype=torch.bool)


# ----------------------------------------------------------------------------
# model, loss, validation
# ----------------------------------------------------------------------------

def freeze_for(model, train_only):
    """Freezes what --train-only keeps; returns the encoder modules that still learn.

    Fine-tuning moves the features that carry a model to streets it never saw
    (Kumar et al. 2022, "Fine-tuning can distort pretrained features"): p27 let only
    the head that draws the classes' borders learn. The coarsest stages see whole
    scenes (tunnels, night, dashboards) at 1/32 and 1/16 of the frame, while the
    finer ones, which draw the edges, stay as they were (p29-p34)."""
    if train_only == "all":
        return []
    model.segformer.requires_grad_(False)
    learning = [encoder_stage(model, k) for k in {"decoder": [], "stage4": [3], "stage34": [2, 3]}[train_only]]
    for module in learning:
        module.requires_grad_(True)
    return learning


def encoder_stage(model, k):
    """Stage k's modules (patch embedding, blocks, norm), under either transformers layout."""
    segformer = model.segformer
    if hasattr(segformer, "stages"):  # transformers >= 5
        return segformer.stages[k]
    enc = segformer.encoder  # transformers 4: one list per kind of module
    return torch.nn.ModuleList([enc.patch_embeddings[k], enc.block[k], enc.layer_norm[k]])


def build_model(args):
    from transformers import SegformerForSemanticSegmentation
    cfg = base.build_config(args.arch, args.drop_path)
    labels = CLASSES + extra_channels(args)
    cfg.num_labels = len(labels)
    cfg.id2label = {i: n for i, n in enumerate(labels)}
    cfg.label2id = {n: i for i, n in enumerate(labels)}
    cfg.semantic_loss_ignore_index = IGNORE
    model = SegformerForSemanticSegmentation(cfg)
    if args.init_from:
        src = SegformerForSemanticSegmentation.from_pretrained(args.init_from).float()
        state = src.state_dict()
        own = model.state_dict()
        src_labels = [src.config.id2label[i] for i in range(src.config.num_labels)]
        for k, v in state.items():
            if k.startswith("decode_head.classifier."):
                continue
            own[k] = v
        w, b = state["decode_head.classifier.weight"], state["decode_head.classifier.bias"]
        if src_labels == CLASSES:
            own["decode_head.classifier.weight"][:N], own["decode_head.classifier.bias"][:N] = w, b
            for c in range(N, len(labels)):  # each source's road starts as the product's road
                own["decode_head.classifier.weight"][c] = w[ROAD]
                own["decode_head.classifier.bias"][c] = b[ROAD]
        else:  # the CamVid model: each new class starts from the rows of what it was
            for c, rows in INIT_ROWS.items():
                own["decode_head.classifier.weight"][c] = w[rows].mean(0)
                own["decode_head.classifier.bias"][c] = b[rows].mean(0)
        model.load_state_dict(own)
    return model


def road_from(logits, channel: int, detach_rows=()):
    """[B, N, H, W]: the product's softmax with its road taken from `channel`.
    The competing rows in `detach_rows` are constants there: the source's loss
    does not move them, so their border with road is CamVid's to draw
    (p12-plan.md's hypothesis: probes p13, all rows, and p14, sidewalk only)."""
    rows = [logits[:, c:c + 1].detach() if c in detach_rows else logits[:, c:c + 1] for c in range(1, N)]
    return torch.cat([logits[:, channel:channel + 1], *rows], dim=1)


def binary_road_loss(logits, mask, target):
    """Summed BCE of P(road) (channel ROAD of `logits`' softmax) against `target` where `mask`."""
    log_road = F.log_softmax(logits, dim=1)[:, ROAD]
    log_rest = torch.log1p(-log_road.exp().clamp(max=1 - 1e-6))
    return (-(target * log_road + (1 - target) * log_rest))[mask].sum()


def binary_ego_loss(logits, mask):
    """Summed -log(1 - P(ego)) where `mask`: not the ego vehicle, and nothing said of what it is."""
    p_ego = F.softmax(logits, dim=1)[:, EGO]
    return -torch.log1p(-p_ego.clamp(max=1 - 1e-6))[mask].sum()


def loss_fn(logits, y, class_weight=None, idd_channel=None, teacher_channel=None, idd_detach=(),
            teacher_detach=(), no_ego=None):
    """Class CE on class labels (weighted per class when given); road-or-not
    BCE on soft and not-road labels; not-ego BCE on NOT_EGO. With an IDD road channel, IDD's pixels
    (IDD_BASE + class) are scored on the softmax whose road is that channel;
    with a teacher road channel, the teacher's codes (TEACHER_LO..
    TEACHER_NOT_ROAD) likewise; every other pixel on channels 0..N-1.
    `idd_detach`, `teacher_detach`: the shared rows that get no gradient on each channel's softmax.
    `no_ego` ([B] bool): those frames are also scored not-ego on every pixel not labelled EGO or IGNORE."""
    own = logits[:, :N]
    hard = y < N
    ce_target = torch.where(hard, y, torch.full_like(y, IGNORE))
    total = F.cross_entropy(own, ce_target, weight=class_weight, ignore_index=IGNORE, reduction="sum")
    count = hard.sum()
    idd = (y >= IDD_BASE) & (y < IDD_BASE + N)
    if idd_channel is not None and idd.any():
        idd_logits = road_from(logits, idd_channel, idd_detach)
        idd_target = torch.where(idd, y - IDD_BASE, torch.full_like(y, IGNORE))
        total = total + F.cross_entropy(idd_logits, idd_target, weight=class_weight, ignore_index=IGNORE,
                                        reduction="sum")
        count = count + idd.sum()
    soft = (y >= SOFT_LO) & (y <= SOFT_HI)
    binary = soft | (y == NOT_ROAD)
    if binary.any():
        t = torch.where(soft, (y.float() - SOFT_LO) / 100, torch.zeros_like(y, dtype=torch.float32))
        total = total + binary_road_loss(own, binary, t)
        count = count + binary.sum()
    not_ego = y == NOT_EGO
    if no_ego is not None and no_ego.any():
        not_ego = not_ego | (no_ego[:, None, None] & (y != EGO) & (y != IGNORE))
    if not_ego.any():
        total = total + binary_ego_loss(own, not_ego)
        count = count + not_ego.sum()
    teacher = (y >= TEACHER_LO) & (y <= TEACHER_NOT_ROAD)
    if teacher_channel is not None and teacher.any():
        t = torch.where(y <= TEACHER_HI, (y.float() - TEACHER_LO) / (TEACHER_HI - TEACHER_LO),
                        torch.zeros_like(y, dtype=torch.float32))
        total = total + binary_road_loss(road_from(logits, teacher_channel, teacher_detach), teacher, t)
        count = count + teacher.sum()
    return total / count.clamp(min=1)


@torch.no_grad()
def road_iou(model, frames, width, device) -> tuple[float, list[float]]:
    """Pooled road IoU and per-class IoU (classes present) as the daemon sees the frames."""
    model.eval()
    conf = torch.zeros(N, N, dtype=torch.long)
    inter = union = 0
    for im, lab in frames:
        x = base.preprocess_like_daemon(im, width, device)
        logits = model(pixel_values=x).logits[:, :N]  # the product's channels
        logits = F.interpolate(logits.float(), size=lab.shape, mode="bilinear", align_corners=False)
        pred = logits.argmax(1)[0].cpu()
        gt = torch.from_numpy(lab.astype(np.int64))
        valid = gt < N
        inter += int(((pred == ROAD) & (gt == ROAD) & valid).sum())
        union += int((((pred == ROAD) | (gt == ROAD)) & valid).sum())
        conf += torch.bincount(gt[valid] * N + pred[valid], minlength=N * N).view(N, N)
    tp = conf.diag().double()
    u = conf.sum(0).double() + conf.sum(1).double() - tp
    ious = [float(tp[c] / u[c]) if conf[c].sum() > 0 else float("nan") for c in range(N)]
    model.train()
    return inter / max(union, 1), ious


def product_model(model, idd_road_mix: float = 0.0):
    """The model with the product's N outputs. With an IDD road channel, the
    road row becomes (1 - mix) * road + mix * road_idd: the head is linear, so
    that is the same mix of the two road logits."""
    if model.config.num_labels == N:
        return model
    m = copy.deepcopy(model)
    old = m.decode_head.classifier
    new = torch.nn.Conv2d(old.in_channels, N, kernel_size=1).to(old.weight.device)
    with torch.no_grad():
        new.weight.copy_(old.weight[:N])
        new.bias.copy_(old.bias[:N])
        if idd_road_mix:
            c = model.config.label2id["road_idd"]
            new.weight[ROAD] = (1 - idd_road_mix) * old.weight[ROAD] + idd_road_mix * old.weight[c]
            new.bias[ROAD] = (1 - idd_road_mix) * old.bias[ROAD] + idd_road_mix * old.bias[c]
    m.decode_head.classifier = new
    m.config.num_labels = N
    m.config.id2label = {i: n for i, n in enumerate(CLASSES)}
    m.config.label2id = {n: i for i, n in enumerate(CLASSES)}
    return m


def export(model, out_dir: str, meta: dict) -> None:
    base.CLASSES[:] = CLASSES  # train.export writes train.CLASSES as the label maps
    base.IGNORE = IGNORE
    base.export(product_model(model, meta.get("idd_road_mix", 0.0)), out_dir)
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump(meta, f, indent=2)


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------

def comma_list(text: str) -> list:
    """`a,b,,c` -> ['a', 'b', 'c'] (an empty string: none)."""
    return [x for x in text.split(",") if x]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--init-from", help="an HF SegFormer folder (the CamVid model: its classifier rows are mapped)")
    ap.add_argument("--arch", default="b0-d128", choices=sorted(base.ARCHS))
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--time-budget-min", type=float, default=0,
                    help="also end by this wall-clock budget: the LR decays by max(step share, time share), "
                         "and the run validates and exports before it runs out (a device call's fixed time)")
    ap.add_argument("--mix", default="camvid:2,idd:2,teacher:3,synth:1",
                    help="frames of each source in every batch")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--drop-path", type=float, default=0.1)
    ap.add_argument("--crop-w", type=int, default=512)
    ap.add_argument("--crop-h", type=int, default=384)
    ap.add_argument("--base-width", type=int, default=1024)
    ap.add_argument("--scale-min", type=float, default=0.5)
    ap.add_argument("--scale-max", type=float, default=2.0)
    ap.add_argument("--road-augment", type=float, default=0.5)
    ap.add_argument("--road-augment-skip", type=comma_list,
                    default=["near_car", "overpass"])
    ap.add_argument("--hood-mirror", type=float, default=0.0,
                    help="share of augment.py's drawn bonnets that mirror the scene in front of the car "
                         "(glossy paint; p37). 0 draws them as every run before p37 did")
    ap.add_argument("--cast-shadows", type=float, default=0.0,
                    help="probability of augment.py's cast_shadows (trees', buildings' shadows on the ground); "
                         "0 draws none, as every run before it")
    ap.add_argument("--car-paint", type=float, default=0.0,
                    help="probability of augment.py's car_paint (other vehicles repainted white or silver); "
                         "0 draws none, as every run before it")
    ap.add_argument("--cast-shadows-sources", type=comma_list, default=[],
                    help="the sources whose frames get the cast shadows (default: all)")
    ap.add_argument("--shade-exposure", type=float, default=0.0,
                    help="share of the cast shadows seen by a camera exposed for the shade (the sunlit flecks "
                         "blown out); 0 draws nothing, as every run before it")
    ap.add_argument("--tunnel", type=float, default=0.0,
                    help="probability of augment.py's tunnel (the street seen from inside a tunnel, its walls "
                         "labelled other); 0 draws none, as every run before it")
    ap.add_argument("--tunnel-walkways", action="store_true",
                    help="the drawn tunnel keeps a strip of ground beside the road (a walkway or verge) and raises "
                         "its walls beyond it, so the frame's bottom corners need not become wall (p52)")
    ap.add_argument("--tunnel-lit-walls", action="store_true",
                    help="the drawn tunnel's walls lit 1-2x brighter than its road, evenly down to the camera "
                         "(p53)")
    ap.add_argument("--tunnel-near-ignore", action="store_true",
                    help="the drawn tunnel's walls in the lower half between the road's far end and the frame's "
                         "bottom are drawn but left unscored (p55)")
    ap.add_argument("--tunnel-sources", type=comma_list, default=[],
                    help="the sources whose frames get the drawn tunnel (default: all)")
    ap.add_argument("--rain", type=float, default=0.0,
                    help="probability of augment.py's rain (a wet, dull day, the road a blurred mirror, drops on "
                         "the windscreen; labels unchanged); 0 draws none, as every run before it")
    ap.add_argument("--rain-sources", type=comma_list, default=[],
                    help="the sources whose frames get the drawn rain (default: all)")
    ap.add_argument("--centre-line", type=float, default=0.0,
                    help="probability of augment.py's centre_line (a double yellow or other centre line painted "
                         "along the middle of the road, road both sides; labels unchanged); 0 draws none, as "
                         "every run before it (c1-plan.md)")
    ap.add_argument("--centre-line-sources", type=comma_list, default=[],
                    help="the sources whose frames get the painted centre line (default: all)")
    ap.add_argument("--barrier", type=float, default=0.0,
                    help="probability of augment.py's barrier (a row of concrete or works barriers on one edge of "
                         "the road, labelled other); 0 draws none, as every run before it (c5-plan.md)")
    ap.add_argument("--barrier-sources", type=comma_list, default=[],
                    help="the sources whose frames get the drawn barriers (default: all)")
    ap.add_argument("--shadows-on-ego", action="store_true",
                    help="cast shadows fall on the ego vehicle's bonnet too, not on the ground alone")
    ap.add_argument("--road-augment-sources", type=comma_list, default=[],
                    help="only these sources (e.g. teacher) get --road-augment's scene augmentations; "
                         "default every source. The teacher labelled the clean frame, so its night is "
                         "the day's road, where CamVid's border moved under the same augmentations (p12)")
    ap.add_argument("--ego-paste", type=float, default=0.3)
    ap.add_argument("--ego-weight", type=float, default=1.0,
                    help="cross-entropy weight of ego_vehicle pixels (the class is rare and a white bonnet looks like light road)")
    ap.add_argument("--idd-teacher-min", type=float, default=0.0,
                    help="leave IDD drivable pixels unscored where the teacher's P(road) is below this "
                         "(needs DATA/idd-teacher from tools/teacher/label.py --idd; 0 = off)")
    ap.add_argument("--idd-road-channel", action="store_true",
                    help="score IDD's drivable on an extra road channel (shared body and other classes), so "
                         "the product's road keeps CamVid's border; exports collapse it (--export-idd-road-mix)")
    ap.add_argument("--teacher-road-channel", action="store_true",
                    help="score the teacher's, self-trained and synthetic frames' road-or-not on an extra road "
                         "channel (like --idd-road-channel), dropped at export")
    ap.add_argument("--aux-detach", nargs="?", const=["all"], default="",
                    type=comma_list,
                    help="with --idd-road-channel/--teacher-road-channel: their losses leave these shared rows "
                         "unmoved ('all' when given bare: sidewalk .. other; or names, e.g. sidewalk), so "
                         "only CamVid's labels set those rows' border with road")
    ap.add_argument("--aux-detach-sources", default="idd,teacher",
                    type=comma_list,
                    help="whose losses --aux-detach applies to: idd, teacher (the teacher's, self-trained and "
                         "synthetic frames) or both")
    ap.add_argument("--export-idd-road-mix", default=[0.0],
                    type=lambda s: [float(x) for x in s.split(",") if x],
                    help="with --idd-road-channel: one export per mix of the IDD road row into the product's "
                         "road row (0: the product's road alone; 0.5: the mean); folders step-N[-ema][-iddNN]")
    ap.add_argument("--camvid-repeat", default={},
                    type=lambda s: {k: int(v) for k, v in (kv.rsplit(":", 1) for kv in s.split(",") if kv)},
                    help="PREFIX:K,...: CamVid training frames whose names start with PREFIX are in the pool K times "
                         "(0001TP:3: the dusk drive, where dark road is read as pavement, three times)")
    ap.add_argument("--teacher-product-sources", type=comma_list, default=[],
                    help="substrings of teacher frames' source paths (e.g. rainy.mp4,wenig_nacht) whose frames form "
                         "the mix source teacher_product: scored on the product's own road row even with "
                         "--teacher-road-channel, and left out of the teacher source (the product row learns the "
                         "teacher's road where CamVid has no such light or weather)")
    ap.add_argument("--teacher-product-no-ego", action="store_true",
                    help="teacher_product frames are also scored not ego vehicle on every pixel their labels do "
                         "not make ego or ignore (and the teacher's unsure band of --teacher-product-confident "
                         "on not-ego alone): the teacher scores road or not, and where it says not road at the bottom "
                         "of a hood-less clip (rainy.mp4) the student was free to read its own bonnet there "
                         "(p64-plan.md). Every teacher-product source must have no bonnet or a drawn one "
                         "(tools/teacher/ego-outlines.json)")
    ap.add_argument("--teacher-product-confident", type=float, default=0.0,
                    help="C in (0.5, 1): teacher_product pixels whose teacher P(road) lies strictly between 1-C "
                         "and C are unscored, so the product row learns the teacher's road interior and its "
                         "clear non-road but not its edges (p20 lost CamVid val to them); 0: every pixel")
    ap.add_argument("--exposure-target", type=float, default=base.EXPOSURE_TARGET,
                    help="brighten each augmented frame darker than this mean luma as the daemon does "
                         "([model] exposure_target, src/exposure.rs); 0: off (every run before 2026-11-29 17:00)")
    ap.add_argument("--cutmix", type=float, default=0.15)
    ap.add_argument("--plain", default=[], type=comma_list,
                    help="sources (e.g. camvid) whose frames get no pasted bonnet and no CutMix box: their "
                         "own labelled road/pavement border is taught as drawn")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="also keep an exponential moving average of the weights with this decay per step "
                         "(0: off), validated and exported beside the raw weights as step-NNNNNN-ema")
    ap.add_argument("--train-only", choices=["all", "decoder", "stage4", "stage34"], default="all",
                    help="decoder: the encoder stays as --init-from gave it (frozen, in eval mode: no drop-path), "
                         "only the decode head learns (run p27); stage4 / stage34: the encoder's last stage / last "
                         "two stages learn too (run p29)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--bf16", choices=["auto", "on", "off"], default="auto",
                    help="bfloat16 autocast (weights stay float32): auto = on CUDA, and on CPUs with AVX512-BF16 or AMX "
                         "(1.55x a step on the 2-core dev VM: 1.65 s against 2.55 s, batch 8 at 512x384)")
    ap.add_argument("--val-every", type=int, default=500)
    ap.add_argument("--val-width", type=int, default=1024)
    ap.add_argument("--save-every-min", type=float, default=10)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--limit-val", type=int, default=0, help="validate on the first N frames of each set (smoke tests)")
    ap.add_argument("--data", default=DATA, help="the staged folder (tools/train/stage-data.sh)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    os.makedirs(args.out, exist_ok=True)
    fh = open(os.path.join(args.out, "train.log"), "a")
    log(f"distill.py {' '.join(sys.argv[1:])} on {device}", fh)
    augment.use_labels(sky=SKY, building=OTHER, car=VEHICLE, road=ROAD, pavement=SIDEWALK,
                       ignore=IGNORE, ego=EGO, soft_road_min=SOFT_LO + 50, persons=(PERSON,))
    augment.HOOD_MIRROR = args.hood_mirror
    augment.CAST_SHADOWS = args.cast_shadows
    augment.SHADOWS_ON_EGO = args.shadows_on_ego
    augment.SHADE_EXPOSURE = args.shade_exposure
    augment.CAR_PAINT = args.car_paint
    augment.TUNNEL = args.tunnel
    augment.TUNNEL_WALKWAYS = args.tunnel_walkways
    augment.TUNNEL_LIT_WALLS = args.tunnel_lit_walls
    augment.TUNNEL_NEAR_IGNORE = args.tunnel_near_ignore
    augment.RAIN = args.rain
    augment.CENTRE_LINE = args.centre_line
    augment.BARRIER = args.barrier
    camvid_root = os.path.join(args.data, "camvid") if os.path.isdir(os.path.join(args.data, "camvid")) \
        else os.path.join(SHARED, "data", "camvid")
    idd_root = os.path.join(args.data, "idd-lite") if os.path.isdir(os.path.join(args.data, "idd-lite")) \
        else os.path.join(SHARED, "data", "idd-lite")
    t0 = time.time()
    mix = {k: int(v) for k, v in (kv.split(":") for kv in args.mix.split(","))}
    if ("teacher_product" in mix) != bool(args.teacher_product_sources):
        raise SystemExit("--teacher-product-sources and the mix source teacher_product go together")
    if args.teacher_product_no_ego and "teacher_product" not in mix:
        raise SystemExit("--teacher-product-no-ego needs the mix source teacher_product")
    if args.teacher_product_confident and not 0.5 < args.teacher_product_confident < 1:
        raise SystemExit(f"--teacher-product-confident {args.teacher_product_confident}: must be in (0.5, 1), or 0")
    if unknown := sorted(set(args.cast_shadows_sources) - set(mix)):
        raise SystemExit(f"--cast-shadows-sources {','.join(unknown)}: not in --mix {args.mix}")
    if unknown := sorted(set(args.tunnel_sources) - set(mix)):
        raise SystemExit(f"--tunnel-sources {','.join(unknown)}: not in --mix {args.mix}")
    if unknown := sorted(set(args.barrier_sources) - set(mix)):
        raise SystemExit(f"--barrier-sources {','.join(unknown)}: not in --mix {args.mix}")
    if unknown := sorted(set(args.rain_sources) - set(mix)):
        raise SystemExit(f"--rain-sources {','.join(unknown)}: not in --mix {args.mix}")
    if unknown := sorted(set(args.centre_line_sources) - set(mix)):
        raise SystemExit(f"--centre-line-sources {','.join(unknown)}: not in --mix {args.mix}")
    if unknown := sorted(set(args.road_augment_sources) - set(mix)):
        raise SystemExit(f"--road-augment-sources {','.join(unknown)}: not in --mix {args.mix}")
    pools = {}
    loaders = {"camvid": lambda: load_camvid(camvid_root, "train", args.camvid_repeat),
               "idd": lambda: load_idd(idd_root, held_out=False, teacher_dir=os.path.join(args.data, "idd-teacher"),
                                       teacher_min=args.idd_teacher_min),
               "teacher": lambda: load_teacher(os.path.join(args.data, "teacher"), args.base_width,
                                               leave_out=args.teacher_product_sources if "teacher_product" in mix else ()),
               # the teacher's frames of --teacher-product-sources, scored on the product's road row
               "teacher_product": lambda: load_teacher(os.path.join(args.data, "teacher"), args.base_width,
                                                       only=args.teacher_product_sources),
               "synth": lambda: load_synth(os.path.join(args.data, "synth")),
               # real bonnets in place, scored on ego or not only (load_ego_frames)
               "egoframes": lambda: load_ego_frames(os.path.join(args.data, "ego"), args.base_width),
               # the student's temporally agreed labels where the teacher was unsure (tools/teacher/selftrain.py)
               "selftrain": lambda: load_teacher(os.path.join(args.data, "selftrain"), args.base_width)}
    for name in list(mix):
        pools[name] = loaders[name]()
        if not pools[name]:
            log(f"no {name} frames: left out of the mix", fh)
            del mix[name], pools[name]
    egos = load_egos(os.path.join(args.data, "ego")) if args.ego_paste > 0 else []
    val = {"camvid-val": load_camvid(camvid_root, "val"), "idd-holdout": load_idd(idd_root, held_out=True)}
    if args.limit_val:
        val = {k: v[: args.limit_val] for k, v in val.items()}
    log("data: " + ", ".join(f"{k} {len(v)}" for k, v in pools.items()) + f", ego cut-outs {len(egos)}; "
        + ", ".join(f"{k} {len(v)}" for k, v in val.items()) + f" ({time.time() - t0:.0f} s)", fh)

    model = build_model(args).to(device)
    learning_stages = freeze_for(model, args.train_only)
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.ndim > 1]
    no_decay = [p for p in trainable if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)
    # A running average of the trajectory: a soup that costs no extra run
    # (Polyak averaging); float tensors average, counters copy.
    ema = copy.deepcopy(model).eval() if args.ema > 0 else None
    state_path = os.path.join(args.out, "state.pt")
    step = 0
    # Wall-clock time already spent (--time-budget-min counts across resumes).
    spent_s = 0.0
    if os.path.exists(state_path):
        st = torch.load(state_path, map_location=device)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        if ema is not None:
            ema.load_state_dict(st.get("ema", st["model"]))
        step = st["step"]
        spent_s = float(st.get("elapsed_s", 0.0))
        log(f"resumed at step {step} ({spent_s / 60:.1f} min of the budget spent)", fh)

    def save_state():
        tmp = state_path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "args": vars(args),
                    "elapsed_s": time.time() - t_start, **({"ema": ema.state_dict()} if ema is not None else {})}, tmp)
        os.replace(tmp, state_path)

    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(flag=True))

    dataset = Batches(pools, mix, egos, args)
    sampler = list(range(step, args.steps))
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, sampler=sampler, num_workers=args.workers,
                                         persistent_workers=args.workers > 0,
                                         pin_memory=device.type == "cuda")

    t_start = time.time() - spent_s
    budget_s = args.time_budget_min * 60 if args.time_budget_min > 0 else math.inf
    val_s = {"last": 0.0}

    def progress(s):
        return min(1.0, max(s / args.steps, (time.time() - t_start) / budget_s))

    def lr_at(s):
        if s < args.warmup:
            return args.lr * (0.01 + 0.99 * s / args.warmup)
        return args.lr * (1 - progress(s)) + 1e-6

    def validate_and_export():
        t = time.time()
        mixes = args.export_idd_road_mix if args.idd_road_channel else [0.0]
        for weights, suffix in ((model, ""), (ema, "-ema")):
            if weights is None:
                continue
            for mix in mixes:
                product = product_model(weights, mix)
                tag = suffix + (f"-idd{round(mix * 100):02d}" if mix else "")
                parts = []
                for name, frames in val.items():
                    road, ious = road_iou(product, frames, args.val_width, device)
                    parts.append(f"{name} road {road:.4f} ("
                                 + " ".join(f"{c}={v:.3f}" for c, v in zip(CLASSES, ious) if v == v) + ")")
                out = os.path.join(args.out, f"step-{step:06d}{tag}")
                export(product, out, {"step": step, "args": vars(args), "val": parts, "idd_road_mix": mix})
                log(f"step {step}{tag}: " + " | ".join(parts) + f" ({time.time() - t:.0f} s) -> {out}", fh)
        val_s["last"] = time.time() - t

    cpu_bf16 = "avx512_bf16" in open("/proc/cpuinfo").read() or "amx_bf16" in open("/proc/cpuinfo").read() \
        if os.path.exists("/proc/cpuinfo") else False
    use_bf16 = args.bf16 == "on" or (args.bf16 == "auto" and (device.type == "cuda" or cpu_bf16))
    log(f"bf16 autocast {'on' if use_bf16 else 'off'}", fh)
    if args.idd_road_channel and "idd" not in mix:
        raise SystemExit("--idd-road-channel without idd in --mix: nothing to score the channel on")
    channel_of = {name: N + i for i, name in enumerate(extra_channels(args))}
    unknown = [r for r in args.aux_detach if r != "all" and r not in CLASSES[1:]]
    if unknown:
        raise SystemExit(f"--aux-detach: no shared row {unknown}; the rows are {', '.join(CLASSES[1:])} or all")
    if any(x not in ("idd", "teacher") for x in args.aux_detach_sources):
        raise SystemExit(f"--aux-detach-sources: {args.aux_detach_sources}; say idd, teacher or both")
    detach_rows = tuple(range(1, N)) if "all" in args.aux_detach else tuple(CLASSES.index(r) for r in args.aux_detach)
    idd_detach = detach_rows if "idd" in args.aux_detach_sources else ()
    teacher_detach = detach_rows if "teacher" in args.aux_detach_sources else ()
    class_weight = None
    if args.ego_weight != 1.0:
        class_weight = torch.ones(N, device=device)
        class_weight[EGO] = args.ego_weight
    model.train()
    last_save = time.time()
    win = {"n": 0, "t": 0.0, "loss": 0.0}
    t_step = time.perf_counter()
    validated_at = step
    for xb, yb, no_ego_b in loader:
        if stop["flag"]:
            break
        if time.time() - t_start > budget_s - 1.5 * val_s["last"] - 20:
            log(f"time budget: ending at step {step}", fh)
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        if args.train_only != "all":
            # Every step: validation hands the model back in train mode.
            model.segformer.eval()
            for module in learning_stages:
                module.train()
        x = base.normalize(xb.to(device, non_blocking=True).float())
        y = yb.to(device, non_blocking=True).long()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(pixel_values=x).logits
        logits = F.interpolate(logits.float(), size=y.shape[-2:], mode="bilinear", align_corners=False)
        loss = loss_fn(logits, y, class_weight, channel_of.get("road_idd"), channel_of.get("road_teacher"),
                       idd_detach, teacher_detach, no_ego_b.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if ema is not None:
            with torch.no_grad():
                for e, v in zip(ema.state_dict().values(), model.state_dict().values()):
                    if e.dtype.is_floating_point:
                        e.lerp_(v, 1 - args.ema)
                    else:
                        e.copy_(v)
        step += 1
        now = time.perf_counter()
        win["n"] += 1
        win["t"] += now - t_step
        win["loss"] += float(loss.detach())
        t_step = now
        if win["n"] >= args.log_every:
            log(f"step {step}/{args.steps} loss {win['loss'] / win['n']:.4f} lr {lr_at(step):.2e} "
                f"{win['t'] / win['n']:.2f} s/step", fh)
            win = {"n": 0, "t": 0.0, "loss": 0.0}
        if step % args.val_every == 0 or step == args.steps:
            validate_and_export()
            validated_at = step
            t_step = time.perf_counter()
        if time.time() - last_save > args.save_every_min * 60:
            save_state()
            last_save = time.time()
    if validated_at != step and not stop["flag"]:
        validate_and_export()
    save_state()
    if stop["flag"]:
        log(f"stopped at step {step} (state saved; run again to resume)", fh)
    else:
        log(f"done at step {step}", fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())

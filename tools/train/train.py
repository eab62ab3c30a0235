#!/usr/bin/env python3
"""Train the roadseg default model: a SegFormer trained from scratch on CamVid.

The model is ``transformers.SegformerForSemanticSegmentation`` with a randomly
initialised, hand-built ``SegformerConfig`` (no pretrained weights).  The best
checkpoint (by CamVid val mIoU, or road IoU with --select road) is exported as float16
in Hugging Face layout (``config.json`` + ``model.safetensors``) every time it
improves, so a usable model exists early, and once more when training stops.

Validation mimics the roadseg daemon exactly: the RGB uint8 image is resized
bilinearly (align_corners=False, antialias=False) to the inference size
(1024 px wide, height from the image aspect: 1024x768 for CamVid), divided by
255, normalised with the ImageNet mean/std; the 1/4-resolution logits are
upsampled bilinearly to the label size and arg-maxed.

Training batches (PIL augmentation) come from a torch DataLoader: built in the
main process with --workers 0 (the CPU default), in worker processes otherwise
(the CUDA default).  A batch depends only on (--seed, epoch, step), so runs are
reproducible whatever the worker count.

See README.md next to this file for usage.
"""

from __future__ import annotations

import argparse
import copy
import glob
import inspect
import json
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data
from PIL import Image, ImageEnhance

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import augment as road_augment  # noqa: E402  (tools/train/augment.py, beside this file)

CLASSES = [
    "sky", "building", "pole", "road", "pavement", "tree",
    "signsymbol", "fence", "car", "pedestrian", "bicyclist",
]
NUM_CLASSES = len(CLASSES)  # 11
IGNORE = 11                 # "Unlabelled" in the CamVid label maps
ROAD = 3
NOT_ROAD = 254              # synthetic frames: known not to be road, class unknown
ROAD = CLASSES.index("road")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

# Architecture presets.  All share SegFormer's MiT layout (4 stages, overlapping
# patch embeddings with strides 4/2/2/2, efficient self-attention with spatial
# reduction 8/4/2/1) and the all-MLP decode head.
ARCHS = {
    # SegFormer-B0 as published (3.7 M params, decoder 256).
    "b0": dict(hidden_sizes=[32, 64, 160, 256], depths=[2, 2, 2, 2],
               num_attention_heads=[1, 2, 5, 8], sr_ratios=[8, 4, 2, 1],
               decoder_hidden_size=256),
    # B0 encoder with a 128-wide decode head (the default; see README).  The
    # decode head's 1x1 fuse conv runs at 1/4 resolution and dominates the cost
    # of B0 at 1024x576; halving it makes CPU inference ~2x faster.
    "b0-d128": dict(hidden_sizes=[32, 64, 160, 256], depths=[2, 2, 2, 2],
                    num_attention_heads=[1, 2, 5, 8], sr_ratios=[8, 4, 2, 1],
                    decoder_hidden_size=128),
    # Slimmer than B0 (2.0 M params).
    "slim": dict(hidden_sizes=[24, 48, 120, 192], depths=[2, 2, 2, 2],
                 num_attention_heads=[1, 2, 4, 6], sr_ratios=[8, 4, 2, 1],
                 decoder_hidden_size=128),
    # Tiny, for smoke tests.
    "tiny": dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                 num_attention_heads=[1, 1, 2, 4], sr_ratios=[8, 4, 2, 1],
                 decoder_hidden_size=64),
}


def log(msg: str, fh=None) -> None:
    line = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()) + "Z " + msg
    print(line, flush=True)
    if fh is not None:
        fh.write(line + "\n")
        fh.flush()


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------

def list_pairs(root: str, split: str, limit: int | None) -> list[tuple[str, str]]:
    imgs = sorted(glob.glob(os.path.join(root, split, "*.jpg")) +
                  glob.glob(os.path.join(root, split, "*.png")))
    pairs = []
    for p in imgs:
        stem = os.path.splitext(os.path.basename(p))[0]
        lab = os.path.join(root, split + "annot", stem + ".png")
        if not os.path.exists(lab):
            raise FileNotFoundError(f"missing label for {p}: {lab}")
        pairs.append((p, lab))
    if not pairs:
        raise FileNotFoundError(f"no images in {os.path.join(root, split)}")
    if limit:
        pairs = pairs[:limit]
    return pairs


def load_pairs(pairs):
    """Load all images (PIL RGB) and labels (uint8 numpy) into memory."""
    imgs, labs = [], []
    for ip, lp in pairs:
        im = Image.open(ip).convert("RGB")
        im.load()
        lab = np.array(Image.open(lp), dtype=np.uint8)
        if lab.ndim != 2 or lab.shape != (im.height, im.width):
            raise ValueError(f"bad label {lp}: {lab.shape} vs image {im.size}")
        lab[lab > IGNORE] = IGNORE
        imgs.append(im)
        labs.append(lab)
    return imgs, labs


def load_synth(root: str):
    """`roadseg synth --masks-out` drives: root/img/*.png frames (e.g. from
    ffmpeg) and root/masks/*.png road masks (255 = road), paired in sorted
    order. Road pixels are labelled road; the rest NOT_ROAD (only "not road"
    is known there, so the loss pushes p(road) down without naming a class)."""
    imgs_dir, masks_dir = os.path.join(root, "img"), os.path.join(root, "masks")
    frames, masks = sorted(os.listdir(imgs_dir)), sorted(os.listdir(masks_dir))
    if len(frames) != len(masks) or not frames:
        raise ValueError(f"{root}: {len(frames)} frames vs {len(masks)} masks")
    imgs, labs = [], []
    for f, m in zip(frames, masks):
        im = Image.open(os.path.join(imgs_dir, f)).convert("RGB")
        im.load()
        mask = np.array(Image.open(os.path.join(masks_dir, m)).convert("L")) > 127
        imgs.append(im)
        labs.append(np.where(mask, ROAD, NOT_ROAD).astype(np.uint8))
    return imgs, labs


def color_jitter(im: Image.Image, rng: random.Random, b: float, c: float,
                 s: float, h: float) -> Image.Image:
    """torchvision-style ColorJitter (random order of the four ops)."""
    ops = [0, 1, 2, 3]
    rng.shuffle(ops)
    for op in ops:
        if op == 0 and b > 0:
            im = ImageEnhance.Brightness(im).enhance(rng.uniform(1 - b, 1 + b))
        elif op == 1 and c > 0:
            im = ImageEnhance.Contrast(im).enhance(rng.uniform(1 - c, 1 + c))
        elif op == 2 and s > 0:
            im = ImageEnhance.Color(im).enhance(rng.uniform(1 - s, 1 + s))
        elif op == 3 and h > 0:
            shift = int(round(rng.uniform(-h, h) * 255))
            if shift:
                hsv = np.array(im.convert("HSV"))
                hsv[..., 0] = (hsv[..., 0].astype(np.int16) + shift).astype(np.uint8)  # wraps mod 256
                im = Image.fromarray(hsv, "HSV").convert("RGB")
    return im


def augment(im: Image.Image, lab: np.ndarray, rng: random.Random, args):
    """Road-scene augmentations (tools/train/augment.py: night, dusk, glare,
    haze, blur and codec, camera roll and zoom, bars, a bonnet; with
    --road-augment S > 0, each at its probability times S), then random
    scale (relative to the base width) + random crop (pad with ignore) +
    horizontal flip + colour jitter.  Returns uint8 HWC image and uint8 HW
    label of size crop_h x crop_w."""
    if args.road_augment > 0:
        im, lab = road_augment.random_road_augment(im, lab, rng, args.road_augment, args.road_augment_skip)
    W, H = im.size
    ch, cw = args.crop_h, args.crop_w
    s = (args.base_width / W) * rng.uniform(args.scale_min, args.scale_max)
    sw, sh = max(1, int(round(W * s))), max(1, int(round(H * s)))
    # crop window in scaled coordinates
    x0 = rng.randint(0, max(sw - cw, 0))
    y0 = rng.randint(0, max(sh - ch, 0))
    rw, rh = min(cw, sw), min(ch, sh)
    # the same window in source coordinates: resize only that box
    box = (x0 * W / sw, y0 * H / sh, (x0 + rw) * W / sw, (y0 + rh) * H / sh)
    im = color_jitter(im, rng, args.jitter_brightness, args.jitter_contrast,
                      args.jitter_saturation, args.jitter_hue)
    im_c = np.asarray(im.resize((rw, rh), Image.BILINEAR, box=box))
    lab_c = np.asarray(Image.fromarray(lab).resize((rw, rh), Image.NEAREST, box=box))
    out_im = np.zeros((ch, cw, 3), np.uint8)
    out_lab = np.full((ch, cw), IGNORE, np.uint8)
    # place the (possibly smaller) region at a random offset inside the crop
    px = rng.randint(0, cw - rw)
    py = rng.randint(0, ch - rh)
    out_im[py:py + rh, px:px + rw] = im_c
    out_lab[py:py + rh, px:px + rw] = lab_c
    if rng.random() < 0.5:
        out_im = out_im[:, ::-1]
        out_lab = out_lab[:, ::-1]
    return out_im, out_lab


def normalize(x: torch.Tensor) -> torch.Tensor:
    """x: float tensor N,3,H,W in [0,255] -> ImageNet-normalised."""
    mean = torch.tensor(MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=x.device).view(1, 3, 1, 1)
    return (x / 255.0 - mean) / std


def make_batch(imgs, labs, idxs, rng, args):
    """Augment the samples ``idxs`` (drawing from ``rng``) and stack them.
    Returns CPU uint8 tensors: images N,3,H,W (RGB, 0..255) and labels N,H,W
    (class ids, IGNORE, NOT_ROAD).  Kept uint8 so that the worker -> main
    process -> device copies move 1 byte per value; ``to_device`` makes the
    float / long tensors the model and loss use."""
    ims, ls = [], []
    for i in idxs:
        a, b = augment(imgs[i], labs[i], rng, args)
        ims.append(a)
        ls.append(b)
    x = torch.from_numpy(np.stack(ims)).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(np.stack(ls))
    return x, y


def to_device(x: torch.Tensor, y: torch.Tensor, device):
    """uint8 batch (from make_batch / the loader) -> normalised float images and
    long labels on ``device``.  The copies are non_blocking; they overlap with
    other work when the loader hands out pinned memory (pin_memory on CUDA)."""
    x = normalize(x.to(device, non_blocking=True).float())
    return x, y.to(device, non_blocking=True).long()


def batch_rng(seed: int, epoch: int, step: int) -> random.Random:
    """The RNG that draws all augmentation (and synthetic-frame) choices of
    one batch.  A string seed is hashed with SHA-512 by ``random``, so it is the
    same in every process and independent of PYTHONHASHSEED: a batch's content
    depends only on (seed, epoch, step), not on which worker builds it or on
    how many workers there are."""
    return random.Random(f"roadseg-batch:{seed}:{epoch}:{step}")


def epoch_order(seed: int, epoch: int, n: int) -> list[int]:
    """The shuffled order of the n training frames in ``epoch``."""
    perm = list(range(n))
    random.Random(f"roadseg-perm:{seed}:{epoch}").shuffle(perm)
    return perm


class TrainBatches(torch.utils.data.Dataset):
    """Training batches as dataset items: item (epoch, step) is the whole batch
    of that step, i.e. ``batch_size`` augmented CamVid frames taken in the
    epoch's shuffled order, followed by ``synth_per_batch`` augmented synthetic
    frames drawn at random (with ``--synth``).  Used with ``batch_size=None`` in
    the DataLoader, so each worker builds complete batches and the main
    process only copies them to the device."""

    def __init__(self, imgs, labs, synth_imgs, synth_labs, args):
        self.imgs, self.labs = imgs, labs
        self.synth_imgs, self.synth_labs = synth_imgs, synth_labs
        self.args = args
        self._perm_epoch, self._perm = None, None

    def __len__(self):  # not used by the sampler; for completeness
        return max(1, len(self.imgs) // self.args.batch_size)

    def __getitem__(self, key):
        epoch, step = key
        a = self.args
        if self._perm_epoch != epoch:
            self._perm_epoch, self._perm = epoch, epoch_order(a.seed, epoch, len(self.imgs))
        rng = batch_rng(a.seed, epoch, step)
        idxs = self._perm[step * a.batch_size:(step + 1) * a.batch_size]
        x, y = make_batch(self.imgs, self.labs, idxs, rng, a)
        if self.synth_imgs and a.synth_per_batch > 0:
            sidx = [rng.randrange(len(self.synth_imgs)) for _ in range(a.synth_per_batch)]
            xs, ys = make_batch(self.synth_imgs, self.synth_labs, sidx, rng, a)
            x, y = torch.cat([x, xs]), torch.cat([y, ys])
        return x, y


class EpochSampler(torch.utils.data.Sampler):
    """Yields the keys (epoch, 0) .. (epoch, steps-1) of TrainBatches.  The
    sampler runs in the main process, so ``set_epoch`` reaches persistent
    workers too (they get the epoch with every key)."""

    def __init__(self, steps: int):
        self.steps, self.epoch = steps, 1

    def set_epoch(self, epoch: int):
        self.epoch = epoch

    def __len__(self):
        return self.steps

    def __iter__(self):
        return iter([(self.epoch, k) for k in range(self.steps)])


class _WorkerInit:
    """DataLoader worker setup (a picklable callable, so it also works with
    the spawn / forkserver start methods)."""

    def __init__(self, seed: int):
        self.seed = seed

    def __call__(self, worker_id: int):
        # one torch thread per worker: N workers x M threads would oversubscribe
        # the cores that the main process needs for its own work
        torch.set_num_threads(1)
        # Ctrl-C / SIGTERM are for the main process, which finishes the step,
        # validates, exports and then shuts the workers down; a worker that
        # died on the signal would make the DataLoader raise instead.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # the augmentation only uses batch_rng(); seed the global RNGs anyway
        # (seed + worker id + DataLoader's per-run base seed) in case a library does
        info = torch.utils.data.get_worker_info()
        s = (self.seed * 1000003 + worker_id + info.seed) % (2 ** 32)
        random.seed(s)
        np.random.seed(s)


def default_workers(device) -> int:
    """--workers default: 0 (in-process, as before) on CPU, where the cores are
    better spent on the model; min(8, cores - 1) on CUDA."""
    if device.type != "cuda":
        return 0
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:
        ncpu = os.cpu_count() or 1
    return max(1, min(8, ncpu - 1))


def make_loader(dataset: TrainBatches, steps: int, workers: int, prefetch: int,
                device, seed: int):
    sampler = EpochSampler(steps)
    kw = dict(batch_size=None, sampler=sampler, num_workers=workers,
              pin_memory=device.type == "cuda")
    if workers > 0:
        kw.update(persistent_workers=True, prefetch_factor=prefetch,
                  worker_init_fn=_WorkerInit(seed))
    return torch.utils.data.DataLoader(dataset, **kw), sampler


def check_data(dataset: TrainBatches, steps: int, args, device, fh) -> int:
    """--check-data N: build the first N batches of epoch 1 twice, each time
    with a fresh loader, and check that they are identical.  Logs one SHA-256
    over the N batches (compare it between runs, e.g. with other --workers
    values: it should not change) and the loader's batches/s."""
    import hashlib
    digests, rates = [], []
    for rep in range(2):
        loader, sampler = make_loader(dataset, steps, args.workers, args.prefetch_factor,
                                      device, args.seed)
        sampler.set_epoch(1)
        h = hashlib.sha256()
        t0 = time.perf_counter()
        n = 0
        for x, y in loader:
            h.update(x.numpy().tobytes())
            h.update(y.numpy().tobytes())
            n += 1
            if n == 1:
                t1 = time.perf_counter()
                log(f"check-data pass {rep + 1}: first batch x {tuple(x.shape)} {x.dtype}, "
                    f"y {tuple(y.shape)} {y.dtype}, labels {sorted(set(y.unique().tolist()))}, "
                    f"after {t1 - t0:.2f} s", fh)
            if n >= args.check_data:
                break
        dt = time.perf_counter() - t1
        rates.append((n - 1) / dt if n > 1 and dt > 0 else float("nan"))
        digests.append(h.hexdigest())
        del loader
    same = digests[0] == digests[1]
    log(f"check-data: {n} batches, workers {args.workers}, sha256 {digests[0][:16]} / "
        f"{digests[1][:16]} -> {'IDENTICAL' if same else 'DIFFERENT'}; loader "
        f"{rates[0]:.2f} / {rates[1]:.2f} batches/s (after the first batch)", fh)
    return 0 if same else 1


# src/exposure.rs: frames with a mean luma under the target are brightened by a
# gamma curve (no stronger than MIN_GAMMA) before the model sees them.
EXPOSURE_TARGET = 0.25
EXPOSURE_MIN_GAMMA = 0.7
EXPOSURE_UNLIT, EXPOSURE_LIT = 0.04, 0.08  # the curve fades in between (an unlit scene is left alone)


def mean_luma(a: np.ndarray) -> float:
    """src/exposure.rs's mean_luma of an H,W,3 uint8 RGB array: BT.601 luma of
    every 4th pixel of every 4th row (from the 2nd), 0..1."""
    s = a[2::4, 2::4].astype(np.float64)
    if s.size == 0:
        s = a.astype(np.float64)
    return float((0.299 * s[..., 0] + 0.587 * s[..., 1] + 0.114 * s[..., 2]).mean() / 255.0)


def exposure_curve(a: np.ndarray, target: float = EXPOSURE_TARGET):
    """The daemon's tone curve for the frame (256 whole values), or None for
    the identity (bright enough, or target 0 = off)."""
    if target <= 0:
        return None
    luma = np.float32(mean_luma(a))
    if luma >= target or luma <= EXPOSURE_UNLIT:
        return None
    full = min(max(np.log(np.float32(target)) / np.log(luma), EXPOSURE_MIN_GAMMA), 1.0)
    strength = min(max((luma - np.float32(EXPOSURE_UNLIT)) / np.float32(EXPOSURE_LIT - EXPOSURE_UNLIT), 0.0), 1.0)
    gamma = np.float32(1.0 - strength * (1.0 - full))
    if gamma == 1.0:
        return None
    return np.round(255.0 * (np.arange(256) / 255.0) ** float(np.float32(gamma))).astype(np.float32)


def preprocess_like_daemon(im: Image.Image, width: int, device, exposure_target: float = EXPOSURE_TARGET) -> torch.Tensor:
    """Exactly the daemon's preprocessing: uint8 RGB -> its tone curve (the
    identity unless the frame is dark: src/exposure.rs) -> bilinear resize
    (align_corners=False, antialias=False) to width x (width*H/W) -> /255 ->
    ImageNet mean/std.  Returns 1,3,h,w."""
    W, H = im.size
    h = int(round(width * H / W))
    a = np.array(im)
    curve = exposure_curve(a, exposure_target)
    x = torch.from_numpy(a if curve is None else curve[a]).permute(2, 0, 1).unsqueeze(0).float().to(device)
    if (h, width) != (H, W):
        x = F.interpolate(x, size=(h, width), mode="bilinear", align_corners=False,
                          antialias=False)
    return normalize(x)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------

def build_config(arch: str, drop_path: float):
    from transformers import SegformerConfig
    a = ARCHS[arch]
    cfg = SegformerConfig(
        num_channels=3,
        num_encoder_blocks=4,
        depths=a["depths"],
        sr_ratios=a["sr_ratios"],
        hidden_sizes=a["hidden_sizes"],
        patch_sizes=[7, 3, 3, 3],
        strides=[4, 2, 2, 2],
        num_attention_heads=a["num_attention_heads"],
        mlp_ratios=[4, 4, 4, 4],
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        classifier_dropout_prob=0.1,
        drop_path_rate=drop_path,
        layer_norm_eps=1e-6,
        decoder_hidden_size=a["decoder_hidden_size"],
        semantic_loss_ignore_index=IGNORE,
        num_labels=NUM_CLASSES,
        id2label={i: n for i, n in enumerate(CLASSES)},
        label2id={n: i for i, n in enumerate(CLASSES)},
    )
    return cfg


def export(model, out_dir: str, extra: dict | None = None) -> int:
    """Save a float16 copy of ``model`` in HF layout into out_dir atomically
    (written to a temp dir, then moved file by file).  Returns the size of
    model.safetensors in bytes."""
    os.makedirs(out_dir, exist_ok=True)
    m = copy.deepcopy(model).cpu().eval().half()
    tmp = tempfile.mkdtemp(prefix=".export-", dir=out_dir)
    try:
        kw = {}
        if "safe_serialization" in inspect.signature(m.save_pretrained).parameters:
            kw["safe_serialization"] = True  # transformers 4.x; 5.x always uses safetensors
        m.save_pretrained(tmp, **kw)
        st = os.path.join(tmp, "model.safetensors")
        if not os.path.exists(st):
            raise RuntimeError(f"save_pretrained wrote no model.safetensors: {os.listdir(tmp)}")
        # make sure the label maps are exactly ours (ints as JSON strings)
        cp = os.path.join(tmp, "config.json")
        with open(cp) as f:
            cfg = json.load(f)
        cfg["id2label"] = {str(i): n for i, n in enumerate(CLASSES)}
        cfg["label2id"] = {n: i for i, n in enumerate(CLASSES)}
        cfg["semantic_loss_ignore_index"] = IGNORE
        with open(cp, "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        size = os.path.getsize(st)
        for name in ("model.safetensors", "config.json"):
            os.chmod(os.path.join(tmp, name), 0o644)
            os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return size


# ----------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------

@torch.no_grad()
def evaluate(model, imgs, labs, width: int, device, batch: int = 1):
    model.eval()
    conf = torch.zeros(NUM_CLASSES, NUM_CLASSES, dtype=torch.long)
    with torch.inference_mode():
        for i in range(0, len(imgs), batch):
            chunk = list(range(i, min(i + batch, len(imgs))))
            # all CamVid frames share one size, so they batch
            x = torch.cat([preprocess_like_daemon(imgs[j], width, device) for j in chunk])
            logits = model(pixel_values=x).logits
            H, W = labs[chunk[0]].shape
            logits = F.interpolate(logits.float(), size=(H, W), mode="bilinear",
                                   align_corners=False)
            pred = logits.argmax(1).cpu()
            for k, j in enumerate(chunk):
                gt = torch.from_numpy(labs[j]).long()
                valid = gt != IGNORE
                idx = gt[valid] * NUM_CLASSES + pred[k][valid]
                conf += torch.bincount(idx, minlength=NUM_CLASSES ** 2).view(
                    NUM_CLASSES, NUM_CLASSES)
    tp = conf.diag().double()
    union = conf.sum(0).double() + conf.sum(1).double() - tp
    iou = torch.where(union > 0, tp / union.clamp(min=1), torch.full_like(tp, float("nan")))
    present = union > 0
    miou = float(iou[present].mean()) if present.any() else 0.0
    acc = float(tp.sum() / conf.sum().clamp(min=1))
    return miou, float(iou[ROAD]), acc, [float(v) for v in iou]


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------

def _augment_names(text):
    names = tuple(n for n in text.split(",") if n)
    unknown = sorted(set(names) - set(road_augment.augment_names()))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"no augmentation {', '.join(unknown)} (there are: {', '.join(road_augment.augment_names())})")
    return names


def build_parser() -> argparse.ArgumentParser:
    """The command line (also used by soup.py to rebuild a run's batch recipe)."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/work/shared/data/camvid",
                    help="CamVid root with train/ trainannot/ val/ valannot/")
    ap.add_argument("--out", default="models/roadseg-camvid",
                    help="export folder (config.json + model.safetensors, fp16)")
    ap.add_argument("--log", default=None,
                    help="log file (default: tools/train/logs/<basename of --out>.log)")
    ap.add_argument("--arch", default="b0-d128", choices=sorted(ARCHS))
    ap.add_argument("--init-from", default=None,
                    help="start from an exported checkpoint folder (config.json + "
                         "model.safetensors, e.g. a previous --out) instead of random "
                         "init; its config wins over --arch.  Use a lower --lr and a "
                         "short --warmup-iters to continue training.")
    ap.add_argument("--epochs", type=int, default=200,
                    help="max epochs (the time budget usually stops training first)")
    ap.add_argument("--time-budget-min", type=float, default=0.0,
                    help="wall-clock budget in minutes for the whole run, including "
                         "validation and export (0 = none).  The LR schedule is "
                         "stretched over it.")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch CPU threads of the main process (0 = torch default); "
                         "loader workers always use 1")
    ap.add_argument("--workers", type=int, default=None,
                    help="DataLoader worker processes that build the augmented batches "
                         "(0 = in the main process, as before).  Default: 0 on CPU, "
                         "min(8, cores - 1) on CUDA.  GPU runs need several: one batch "
                         "of 8 costs 0.1-0.4 s of single-threaded PIL work")
    ap.add_argument("--prefetch-factor", type=int, default=2,
                    help="batches each worker prepares ahead (with --workers > 0)")
    ap.add_argument("--log-every", type=int, default=20,
                    help="every N steps log the data-loading wait vs the whole step "
                         "time (0 = only per epoch)")
    ap.add_argument("--check-data", type=int, default=0, metavar="N",
                    help="build the first N training batches twice with fresh loaders, "
                         "check they are identical, log their hash and the loader's "
                         "batches/s, and exit without training")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--warmup-iters", type=int, default=150)
    ap.add_argument("--poly-power", type=float, default=1.0)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--drop-path", type=float, default=0.1)
    ap.add_argument("--class-weights", default="sqrt", choices=["none", "sqrt"],
                    help="'sqrt': CE weights sqrt(median_freq/freq), clipped to [0.5, 4]")
    ap.add_argument("--base-width", type=int, default=1024,
                    help="scale 1.0 = image resized to this width (the daemon's inference width)")
    ap.add_argument("--scale-min", type=float, default=0.5)
    ap.add_argument("--scale-max", type=float, default=2.0)
    ap.add_argument("--crop-w", type=int, default=512)
    ap.add_argument("--crop-h", type=int, default=288)
    ap.add_argument("--jitter-brightness", type=float, default=0.3)
    ap.add_argument("--jitter-contrast", type=float, default=0.3)
    ap.add_argument("--jitter-saturation", type=float, default=0.3)
    ap.add_argument("--jitter-hue", type=float, default=0.05)
    ap.add_argument("--road-augment", type=float, default=0.0, metavar="S",
                    help="strength of tools/train/augment.py's road-scene augmentations "
                         "(night, dusk, glare, haze, blur/codec, camera, bars, bonnet): "
                         "each applied with its probability times S; 0 = off")
    ap.add_argument("--road-augment-skip", type=_augment_names, default=(),
                    metavar="NAME,...",
                    help="augmentations of --road-augment left out, e.g. near_car,overpass,reflection "
                         "(run 7's set): " + ", ".join(road_augment.augment_names()))
    ap.add_argument("--val-width", type=int, default=1024,
                    help="validation inference width (height from the image aspect)")
    ap.add_argument("--val-every", type=int, default=1,
                    help="validate every N epochs (always in the last 30%% of the "
                         "schedule and on the last epoch)")
    ap.add_argument("--val-batch", type=int, default=2)
    ap.add_argument("--limit-train", type=int, default=0, help="use only N train images (smoke tests)")
    ap.add_argument("--limit-val", type=int, default=0, help="use only N val images (smoke tests)")
    ap.add_argument("--iters-per-epoch", type=int, default=0,
                    help="cap iterations per epoch (smoke tests)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--synth", default=None,
                    help="folder with img/ and masks/ from `roadseg synth --masks-out` (frames extracted with ffmpeg)")
    ap.add_argument("--synth-per-batch", type=int, default=1, help="synthetic frames added to each batch")
    ap.add_argument("--synth-weight", type=float, default=1.0, help="weight of the not-road term on synthetic frames")
    ap.add_argument("--select", default="miou", choices=["miou", "road"],
                    help="which val metric picks the exported checkpoint (ties broken by the other)")
    ap.add_argument("--snapshots", default="", metavar="DIR",
                    help="also export every validated epoch to DIR/epoch-NNN, so that a "
                         "later epoch than the one --select picks can be scored elsewhere "
                         "(e.g. on frames unlike the val set)")
    return ap


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)

    t_start = time.time()
    budget_s = args.time_budget_min * 60.0 if args.time_budget_min > 0 else float("inf")

    if args.threads > 0:
        torch.set_num_threads(args.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True

    if args.workers is None:
        args.workers = default_workers(device)
    if args.workers < 0:
        ap.error("--workers must be >= 0")

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    log_path = args.log or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "logs",
        os.path.basename(os.path.normpath(args.out)) + ".log")
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    fh = open(log_path, "a")
    log("args " + json.dumps(vars(args), sort_keys=True), fh)
    log(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
        f"loader workers {args.workers}, pid {os.getpid()}", fh)

    # stop cleanly on SIGTERM / SIGINT: finish the current step, export, exit
    stop = {"flag": False}

    def _on_signal(signum, _frame):
        stop["flag"] = True
        log(f"signal {signum}: stopping after the current step", fh)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    train_imgs, train_labs = load_pairs(list_pairs(args.data, "train", args.limit_train))
    synth_imgs, synth_labs = load_synth(args.synth) if args.synth else ([], [])
    val_imgs, val_labs = load_pairs(list_pairs(args.data, "val", args.limit_val))
    log(f"data: {len(train_imgs)} train, {len(val_imgs)} val, {len(synth_imgs)} synthetic images", fh)

    n_train = len(train_imgs)
    iters_per_epoch = max(1, n_train // args.batch_size)  # drop last partial batch
    if args.iters_per_epoch:
        iters_per_epoch = min(iters_per_epoch, args.iters_per_epoch)
    train_set = TrainBatches(train_imgs, train_labs, synth_imgs, synth_labs, args)
    if args.check_data > 0:
        rc = check_data(train_set, iters_per_epoch, args, device, fh)
        fh.close()
        return rc

    # class weights from train label frequencies
    counts = np.zeros(NUM_CLASSES, np.float64)
    for lab in train_labs:
        counts += np.bincount(lab.ravel(), minlength=IGNORE + 1)[:NUM_CLASSES]
    freq = counts / counts.sum()
    if args.class_weights == "sqrt":
        w = np.sqrt(np.median(freq) / np.maximum(freq, 1e-8))
        w = np.clip(w, 0.5, 4.0)
        weights = torch.tensor(w, dtype=torch.float32, device=device)
    else:
        weights = None
    log("class freq " + " ".join(f"{n}={f:.4f}" for n, f in zip(CLASSES, freq)), fh)
    if weights is not None:
        log("class weights " + " ".join(f"{n}={v:.2f}" for n, v in zip(CLASSES, w)), fh)

    from transformers import SegformerForSemanticSegmentation
    if args.init_from:
        model = SegformerForSemanticSegmentation.from_pretrained(args.init_from).float().to(device)
        model.config.drop_path_rate = args.drop_path
        arch_desc = f"init from {args.init_from}: hidden {model.config.hidden_sizes} " \
                    f"decoder {model.config.decoder_hidden_size}"
    else:
        cfg = build_config(args.arch, args.drop_path)
        model = SegformerForSemanticSegmentation(cfg).to(device)
        arch_desc = f"arch {args.arch}, config {json.dumps(ARCHS[args.arch])}"
    nparams = sum(p.numel() for p in model.parameters())
    log(f"{arch_desc}: {nparams / 1e6:.2f} M params (~{nparams * 2 / 1e6:.1f} MB fp16)", fh)

    # AdamW; no weight decay on norms / biases / position-free 1-d params
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    opt = torch.optim.AdamW([
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ], lr=args.lr, betas=(0.9, 0.999))

    total_iters = args.epochs * iters_per_epoch
    log(f"{iters_per_epoch} iters/epoch, batch {args.batch_size}, crop {args.crop_w}x{args.crop_h}, "
        f"max {args.epochs} epochs, budget {args.time_budget_min} min", fh)
    # The loader is created after the model is on the device (fork after CUDA
    # init is fine: the workers never touch CUDA).
    loader, sampler = make_loader(train_set, iters_per_epoch, args.workers,
                                  args.prefetch_factor, device, args.seed)

    # time reserved at the end for the last validation + export (updated from measurements)
    est_val_s = 0.0
    est_iter_s = 0.0

    def progress(it: int) -> float:
        p_it = it / max(1, total_iters)
        p_t = (time.time() - t_start) / budget_s if math.isfinite(budget_s) else 0.0
        return min(1.0, max(p_it, p_t))

    def lr_at(it: int) -> float:
        if it < args.warmup_iters:
            return args.lr * (0.01 + 0.99 * it / args.warmup_iters)
        return args.lr * (1.0 - progress(it)) ** args.poly_power + 1e-6

    best = {"miou": -1.0, "road": -1.0, "epoch": 0, "state": None}
    it = 0
    epoch = 0
    while epoch < args.epochs and not stop["flag"]:
        epoch += 1
        model.train()
        t_ep = time.time()
        sampler.set_epoch(epoch)
        batches = iter(loader)
        loss_sum, n_done = 0.0, 0
        wait_ep = 0.0                   # data-loading wait this epoch (s)
        wait_win, step_win, n_win = 0.0, 0.0, 0   # the --log-every window
        out_of_time = False
        for k in range(iters_per_epoch):
            remaining = budget_s - (time.time() - t_start)
            if remaining < est_val_s * 1.2 + est_iter_s + 15 or stop["flag"]:
                out_of_time = True
                break
            lr = lr_at(it)
            for g in opt.param_groups:
                g["lr"] = lr
            t_it = time.perf_counter()
            # With --workers 0 this builds the batch here; otherwise it waits
            # for the next batch the workers have (or are still) preparing.
            xb, yb = next(batches)
            t_data = time.perf_counter() - t_it
            x, y = to_device(xb, yb, device)
            logits = model(pixel_values=x).logits
            logits = F.interpolate(logits, size=y.shape[-2:], mode="bilinear", align_corners=False)
            not_road = y == NOT_ROAD
            y_ce = torch.where(not_road, torch.full_like(y, IGNORE), y)
            loss = F.cross_entropy(logits, y_ce, weight=weights, ignore_index=IGNORE)
            if not_road.any():
                p_road = F.softmax(logits, dim=1)[:, ROAD]
                loss = loss + args.synth_weight * (-torch.log1p(-p_road[not_road].clamp(max=1 - 1e-6))).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if args.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            opt.step()
            loss_f = float(loss.detach())  # waits for the device: the step time below is real
            if not math.isfinite(loss_f):
                log(f"non-finite loss at iter {it}", fh)
            dt = time.perf_counter() - t_it
            # robust running estimate (ignores SIGSTOP pauses longer than 5x the median-ish)
            est_iter_s = dt if est_iter_s == 0 else (0.9 * est_iter_s + 0.1 * min(dt, 5 * est_iter_s))
            loss_sum += loss_f
            n_done += 1
            it += 1
            wait_ep += t_data
            wait_win += t_data
            step_win += dt
            n_win += 1
            if args.log_every > 0 and n_win >= args.log_every:
                log(f"iter {it}: data wait {1e3 * wait_win / n_win:.1f} ms / step "
                    f"{1e3 * step_win / n_win:.1f} ms ({100 * wait_win / step_win:.0f}% waiting "
                    f"for data), {n_win / step_win:.2f} steps/s, loss {loss_f:.4f}", fh)
                wait_win, step_win, n_win = 0.0, 0.0, 0
        del batches  # (persistent workers: the next iter() discards batches still in flight)
        t_train = time.time() - t_ep
        if n_done == 0:
            break
        msg = (f"epoch {epoch} iters {it} loss {loss_sum / n_done:.4f} lr {lr:.2e} "
               f"train {t_train:.0f}s ({t_train / n_done:.2f}s/it, data wait "
               f"{wait_ep / n_done:.2f}s/it = {100 * wait_ep / max(t_train, 1e-9):.0f}%) "
               f"elapsed {(time.time() - t_start) / 60:.1f} min progress {progress(it):.3f}")
        last = out_of_time or stop["flag"] or epoch >= args.epochs
        do_val = last or (epoch % args.val_every == 0) or progress(it) >= 0.7
        if do_val:
            t_v = time.time()
            miou, road, acc, ious = evaluate(model, val_imgs, val_labs, args.val_width,
                                             device, args.val_batch)
            dv = time.time() - t_v
            est_val_s = dv if est_val_s == 0 else max(0.7 * est_val_s, min(dv, 2 * est_val_s))
            msg += (f" | val mIoU {miou:.4f} road {road:.4f} pixacc {acc:.4f} ({dv:.0f}s) | "
                    + " ".join(f"{n}={v:.3f}" for n, v in zip(CLASSES, ious)))
            # --select road: the default model exists to find the road, and
            # val road IoU swings by several points between epochs.
            key = (road, miou) if args.select == "road" else (miou, road)
            better = key > ((best["road"], best["miou"]) if args.select == "road" else (best["miou"], best["road"]))
            if better:
                best.update(miou=miou, road=road, epoch=epoch,
                            state={k: v.detach().clone().cpu() for k, v in model.state_dict().items()})
                size = export(model, args.out)
                msg += f" | NEW BEST -> {args.out} ({size / 1e6:.2f} MB)"
            if args.snapshots:
                export(model, os.path.join(args.snapshots, f"epoch-{epoch:03d}"))
        log(msg, fh)
        if last:
            break

    del loader  # shut the loader's workers down before the final export
    # final: (re-)export the best-val checkpoint
    if best["state"] is not None:
        model.load_state_dict(best["state"])
        size = export(model, args.out)
        log(f"done: best epoch {best['epoch']} val mIoU {best['miou']:.4f} road IoU "
            f"{best['road']:.4f}; exported {args.out} (model.safetensors {size / 1e6:.2f} MB); "
            f"total {(time.time() - t_start) / 60:.1f} min", fh)
        if size > 10 * 1024 * 1024:
            log("WARNING: model.safetensors exceeds 10 MB", fh)
    else:
        log("done: no validation ran, nothing exported", fh)
    fh.close()


if __name__ == "__main__":
    sys.exit(main())

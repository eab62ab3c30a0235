#!/usr/bin/env python3
"""Is CamVid val's road border lost in upsampling or in the model's decision?

  python3 tools/eval/upsampling-check.py MODEL_DIR

Scores the model's road on CamVid val (480x360 labels, the daemon's
preprocessing at 1024 wide, PyTorch) four ways: bilinear upsampling of the
1/4-resolution logits (what the daemon does), an edge-aware guided filter
(He et al.) of the class probabilities with the frame as guide, at two radii
and two epsilons, and the labels brought down to the logits' own grid (no
upsampling at all). If the guided filter or the logit grid scored well above
bilinear, the border would be an upsampling problem a cheap filter could fix.
Prints running figures every 20 frames. A diagnostic (issue 35), not a
selection measure. Needs torch, transformers and ../shared.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import distill as D  # noqa: E402
import train as base  # noqa: E402


def box(x, r):
    """Mean over a (2r+1)^2 window of [B, C, H, W], edges replicated."""
    return F.avg_pool2d(F.pad(x, (r, r, r, r), mode="replicate"), 2 * r + 1, stride=1)


def guided(guide, p, r, eps):
    """He et al.'s guided filter of `p` [1, C, H, W] by the grey `guide` [1, 1, H, W]."""
    m_i, m_p = box(guide, r), box(p, r)
    a = (box(guide * p, r) - m_i * m_p) / (box(guide * guide, r) - m_i * m_i + eps)
    b = m_p - a * m_i
    return box(a, r) * guide + box(b, r)


def main() -> int:
    from transformers import SegformerForSemanticSegmentation
    torch.set_num_threads(1)
    model = SegformerForSemanticSegmentation.from_pretrained(sys.argv[1]).float().eval()
    # Frames and labels both 480x360, so the frame is the guide as it is.
    frames = D.load_camvid(os.path.join(D.SHARED, "data", "camvid"), "val")
    res: dict[str, list[int]] = {}

    def score(name, pred, gt, valid):
        road, ours = (gt == D.ROAD) & valid, (pred == D.ROAD) & valid
        a = res.setdefault(name, [0, 0])
        a[0] += int((ours & road).sum())
        a[1] += int((ours | road).sum())

    with torch.no_grad():
        for i, (im, lab) in enumerate(frames):
            gt = torch.from_numpy(lab.astype(np.int64))
            valid = gt < D.N
            logits = model(pixel_values=base.preprocess_like_daemon(im, 1024, "cpu")).logits.float()
            up = F.interpolate(logits, size=lab.shape, mode="bilinear", align_corners=False)
            score("bilinear", up.argmax(1)[0], gt, valid)
            prob = up.softmax(1)
            grey = torch.from_numpy(np.asarray(im, dtype=np.float32)).mean(-1)[None, None] / 255
            for r, eps in ((4, 1e-3), (8, 1e-3), (4, 1e-2), (8, 1e-2)):
                score(f"guided r{r} e{eps}", guided(grey, prob, r, eps).argmax(1)[0], gt, valid)
            # No upsampling at all: the labels taken down to the logits' grid.
            small = F.interpolate(gt[None, None].float(), size=logits.shape[-2:], mode="nearest")[0, 0].long()
            score("at logit grid", logits.argmax(1)[0], small, small < D.N)
            if i % 20 == 0:
                print(i, {k: round(v[0] / v[1], 4) for k, v in res.items()}, flush=True)
    for k, v in res.items():
        print(f"{k}: {v[0] / v[1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

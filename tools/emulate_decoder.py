#!/usr/bin/env python3
"""Emulates kernels/decoder.cu's decode_tail thread by thread (its block and
pixel arithmetic, the per-pixel taps and the shared-memory layout, all three loops) and compares it with
the decode head as the model runs it unfused: project, upsample each stage
and add, ReLU, classifier. Shapes cover B0 and B5 heads, a last block with
fewer than DEC_PIXELS pixels, and stages smaller and larger than 1/4 size.

    python3 tools/emulate_decoder.py      # exit 0 when every case matches
"""
import sys

import numpy as np

DEC_PIXELS = 8
DEC_MAX_HIDDEN = 1024
DEC_STAGES = 3
BLOCK = 256


def bilinear_source(dst, src_len, dst_len):
    scale = np.float32(src_len) / np.float32(dst_len)
    real = max((np.float32(dst) + np.float32(0.5)) * scale - np.float32(0.5), np.float32(0.0))
    a = min(int(real), src_len - 1)
    return a, min(a + 1, src_len - 1), np.float32(real - np.float32(a))


def upsample(s, sh, sw, h0, w0):
    """The unfused path's resize_bilinear (half-pixel centres)."""
    out = np.zeros((h0 * w0, s.shape[1]), np.float64)
    for dy in range(h0):
        y0, y1, ly = bilinear_source(dy, sh, h0)
        for dx in range(w0):
            x0, x1, lx = bilinear_source(dx, sw, w0)
            a, b = s[y0 * sw + x0], s[y0 * sw + x1]
            c, e = s[y1 * sw + x0], s[y1 * sw + x1]
            out[dy * w0 + dx] = (1 - ly) * ((1 - lx) * a + lx * b) + ly * ((1 - lx) * c + lx * e)
    return out


def reference(acc, stages, cls_w, cls_b, batch, h0, w0):
    """Image by image, as the unfused head runs."""
    out = []
    n0 = h0 * w0
    for img in range(batch):
        hidden = acc[img * n0:(img + 1) * n0].astype(np.float64)
        for s, sh, sw in stages:
            own = s[img * sh * sw:(img + 1) * sh * sw].astype(np.float64)
            hidden = hidden + upsample(own, sh, sw, h0, w0)
        out.append(np.maximum(hidden, 0) @ cls_w.astype(np.float64) + cls_b)
    return np.concatenate(out)


def emulate(acc, stages, cls_w, cls_b, batch, h0, w0, d, labels):
    """decode_tail_impl, one (block, thread) at a time."""
    assert d <= DEC_MAX_HIDDEN
    per_image = h0 * w0
    pixels = per_image * batch
    grid = (pixels + DEC_PIXELS - 1) // DEC_PIXELS
    logits = np.full(pixels * labels, np.nan)
    for block in range(grid):
        hidden = np.full(DEC_PIXELS * DEC_MAX_HIDDEN, np.nan)
        taps = [[None] * DEC_STAGES for _ in range(DEC_PIXELS)]
        first = block * DEC_PIXELS
        count = min(DEC_PIXELS, pixels - first)
        # Each pixel's taps, once per (pixel, stage).
        for tid in range(BLOCK):
            for i in range(tid, count * DEC_STAGES, BLOCK):
                j, stage = i // DEC_STAGES, i - (i // DEC_STAGES) * DEC_STAGES
                p = first + j
                img, q = p // per_image, p % per_image
                dx, dy = q % w0, q // w0
                _, sh, sw = stages[stage]
                x0, x1, lx = bilinear_source(dx, sw, w0)
                y0, y1, ly = bilinear_source(dy, sh, h0)
                base = img * sh * sw * d
                offs = [base + (y0 * sw + x0) * d, base + (y0 * sw + x1) * d, base + (y1 * sw + x0) * d, base + (y1 * sw + x1) * d]
                taps[j][stage] = (offs, lx, ly)
        # __syncthreads()
        for tid in range(BLOCK):
            for i in range(tid, count * d, BLOCK):
                j, ch = i // d, i - (i // d) * d
                p = first + j
                v = float(acc.reshape(-1)[p * d + ch])
                for stage, (s, _, _) in enumerate(stages):
                    assert taps[j][stage] is not None, "read taps no thread wrote"
                    offs, lx, ly = taps[j][stage]
                    flat = s.reshape(-1)
                    a, b = flat[offs[0] + ch], flat[offs[1] + ch]
                    c, e = flat[offs[2] + ch], flat[offs[3] + ch]
                    v += (1 - ly) * ((1 - lx) * a + lx * b) + ly * ((1 - lx) * c + lx * e)
                hidden[j * d + ch] = max(v, 0.0)
        # __syncthreads()
        for tid in range(BLOCK):
            for i in range(tid, count * labels, BLOCK):
                j, l = i // labels, i - (i // labels) * labels
                h = hidden[j * d:(j + 1) * d]
                assert not np.isnan(h).any(), "read a hidden value no thread wrote"
                v = float(cls_b[l]) + float(np.dot(h, cls_w.reshape(-1)[l::labels][:d]))
                logits[(first + j) * labels + l] = v
    assert not np.isnan(logits).any(), "a logit was never written"
    return logits.reshape(pixels, labels)


def case(name, h0, w0, d, labels, sizes, seed, batch=1):
    rng = np.random.default_rng(seed)
    acc = rng.standard_normal((batch * h0 * w0, d)).astype(np.float32)
    stages = [(rng.standard_normal((batch * sh * sw, d)).astype(np.float32), sh, sw) for sh, sw in sizes]
    cls_w = (rng.standard_normal((d, labels)) / np.sqrt(d)).astype(np.float32)
    cls_b = rng.standard_normal(labels).astype(np.float32)
    want = reference(acc, stages, cls_w, cls_b, batch, h0, w0)
    got = emulate(acc, stages, cls_w, cls_b, batch, h0, w0, d, labels)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-9)
    ok = err < 1e-5
    print(f"{name}: {batch}x {h0}x{w0}, hidden {d}, {labels} labels, stages {sizes}: max rel err {err:.2e} {'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    cases = [
        # B0-like head (hidden 256) on a 1/4 map whose pixel count is not a multiple of DEC_PIXELS.
        case("b0", 9, 13, 256, 19, [(5, 7), (3, 4), (2, 2)], 1),
        # B5-like head (hidden 768), few labels.
        case("b5", 6, 8, 768, 3, [(3, 4), (2, 2), (1, 1)], 2),
        # Odd sizes, a stage larger than 1/4 (downsampling) and a single pixel.
        case("odd", 5, 3, 40, 7, [(7, 9), (2, 1), (1, 1)], 3),
        case("one pixel", 1, 1, 16, 2, [(1, 1), (1, 1), (1, 1)], 4),
        # Three images whose blocks straddle image boundaries (5x3 = 15 pixels each).
        case("batch", 5, 3, 24, 5, [(3, 2), (2, 1), (1, 1)], 5, batch=3),
    ]
    sys.exit(0 if all(cases) else 1)


if __name__ == "__main__":
    main()

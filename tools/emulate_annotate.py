#!/usr/bin/env python3
"""Emulates kernels/overlay.cu's annotate_frame thread by thread and compares
it with a line-for-line numpy port of the CPU's overlay (images.rs
`frame_overlay` and `draw_overlay`, frame.rs `FrameOverlay::tint`,
video/annotate.rs `tint_nv12`, `yuv` and `blend`).

What it replays, so that a mistake in any of them shows as a byte difference:
- the host's packing of the overlay (backend/cuda/frame.rs `stage_overlay`:
  258 (r, g, b, alpha) floats, unknown as alpha 0 when not shown, then the
  picture inside letterbox/pillarbox bars as 4 floats; hood tops as u32::MAX
  when there is no hood);
- the launch (`grid_for`: blocks of 256, one thread per pixel) and the
  kernel's grid-stride loop, also with a 3-block grid so the loop wraps;
- each thread's arithmetic in f32, one rounding per operation as
  __fmul_rn/__fadd_rn give, and roundf (half away from zero, as Rust's
  f32::round); the CPU side's `as u8` saturates, the kernel's cast is checked
  to be in range, so the two agree without relying on saturation;
- strides: the kernel tints a padded frame, the CPU a packed one; rows are
  compared pixel for pixel and the padding must come back untouched. Every
  byte is written by at most one thread (the check for races).

Cases: RGB (including one pixel wide and 1x1), RGBA and NV12 with padded
strides, odd RGB/RGBA sizes, hood present/absent/mismatched, unknown checker
on/off, full palette on/off/empty, road alpha 0 and 1, road classes 255 and
above (clamped to 255, which UNKNOWN pre-empts), pillarbox/letterbox bars
(odd sizes, with and without a hood; bars covering the whole frame).

    python3 tools/emulate_annotate.py      # exit 0 when every case matches
"""
import math
import sys

import numpy as np

BLOCK = 256
UNKNOWN = 255
HOOD_ALPHA = np.float32(0.55)
EDGE_ALPHA = np.float32(0.2)
EDGE_REACH = (3, 8)
UNKNOWN_ALPHA = np.float32(0.35)
NO_HOOD = 0xFFFFFFFF
F = np.float32


def round_half_away(v):
    # Exact: an f32 plus 0.5 is representable in f64 at these magnitudes.
    return math.trunc(float(v) + math.copysign(0.5, float(v)))


# ---- The CPU, as written in Rust ----

def picture(bars, width, height):
    """bars.rs Bars::picture: (x0, y0, x1, y1) inside (left, right, top, bottom)."""
    left, right, top, bottom = bars
    x0, y0 = min(left, width), min(top, height)
    return x0, y0, max(max(width - right, 0), x0), max(max(height - bottom, 0), y0)


def frame_overlay(style, hood_tops, hood_size, width, height, bars=(0, 0, 0, 0)):
    """images.rs frame_overlay: (class_tints, unknown, hood, hood_tops, picture)."""
    tints = [((0, 0, 0), F(0.0))] * 256
    palette = style["full_palette"]
    if palette:
        for cls in range(256):
            tints[cls] = (palette[cls % len(palette)], F(style["road_alpha"]) * F(0.5))
    road = [False] * 256
    for c in style["road_classes"]:
        tints[min(c, 255)] = (style["road_colour"], F(style["road_alpha"]))
        road[min(c, 255)] = True
    road[255] = False
    edge = (style["road_colour"], EDGE_ALPHA) if style["road_edge"] else None
    hood_ok = hood_tops is not None and any(t < hood_size[1] for t in hood_tops) and hood_size == (width, height)
    unknown = (style["unknown_colour"], UNKNOWN_ALPHA) if style["show_unknown"] else None
    pic = picture(bars, width, height) if hood_size == (width, height) else (0, 0, width, height)
    return tints, unknown, (style["hood_colour"], HOOD_ALPHA), (list(hood_tops) if hood_ok else []), pic, road, edge


def tint(overlay, classes, w, x, y):
    """frame.rs FrameOverlay::tint."""
    tints, unknown, hood, tops, (x0, y0, x1, y1), road, edge = overlay
    if x < x0 or y < y0 or x >= x1 or y >= y1:
        return None
    if x < len(tops) and y >= tops[x]:
        return hood
    cls = int(classes[y * w + x])
    if cls != UNKNOWN:
        t = tints[cls]
        return t if t[1] > 0.0 else None
    if edge is not None and edge[1] > 0.0:
        def road_at(nx, ny):
            return x0 <= nx < x1 and y0 <= ny < y1 and road[int(classes[ny * w + nx])]
        if any((x >= r and road_at(x - r, y)) or road_at(x + r, y) or (y >= r and road_at(x, y - r)) or road_at(x, y + r)
               for r in EDGE_REACH):
            return edge
    return unknown if unknown is not None and (x // 4 + y // 4) % 2 == 0 else None


def as_u8(v):
    return 0 if math.isnan(v) else max(0, min(255, int(v)))


def cpu_blend(under, over, alpha):
    """annotate.rs blend and draw_overlay's expression: (under * (1 - a) + over * a).round() as u8."""
    return as_u8(round_half_away(F(F(under) * (F(1.0) - alpha)) + F(F(over) * alpha)))


def cpu_yuv(rgb):
    r, g, b = (F(c) for c in rgb)
    return [F(16.0) + F(0.256788) * r + F(0.504129) * g + F(0.097906) * b,
            F(128.0) - F(0.148223) * r - F(0.290993) * g + F(0.439216) * b,
            F(128.0) + F(0.439216) * r - F(0.367788) * g - F(0.071427) * b]


def draw_overlay(pixels, channels, classes, w, h, overlay):
    for i in range(w * h):
        t = tint(overlay, classes, w, i % w, i // w)
        if t is None:
            continue
        colour, alpha = t
        for c in range(3):
            pixels[i * channels + c] = cpu_blend(pixels[i * channels + c], colour[c], alpha)


def tint_nv12(pixels, classes, w, h, overlay):
    for i in range(w * h):
        t = tint(overlay, classes, w, i % w, i // w)
        if t is not None:
            pixels[i] = cpu_blend(pixels[i], cpu_yuv(t[0])[0], t[1])
    for by in range(h // 2):
        for bx in range(w // 2):
            i = 2 * by * w + 2 * bx
            t = tint(overlay, classes, w, i % w, i // w)
            if t is not None:
                _, u, v = cpu_yuv(t[0])
                uv = w * h + by * w + 2 * bx
                pixels[uv] = cpu_blend(pixels[uv], u, t[1])
                pixels[uv + 1] = cpu_blend(pixels[uv + 1], v, t[1])


# ---- The GPU: host packing, launch, kernel ----

def stage_overlay(overlay, width):
    """frame.rs stage_overlay: the kernel's `ov` and `tops`."""
    tints, unknown, hood, tops, pic, road, edge = overlay
    unknown = unknown if unknown is not None else ((0, 0, 0), F(0.0))
    edge = edge if edge is not None else ((0, 0, 0), F(0.0))
    rows = [[F(c[0]), F(c[1]), F(c[2]), F(a)] for c, a in tints + [unknown, hood]] + [[F(v) for v in pic]]
    rows += [[F(edge[0][0]), F(edge[0][1]), F(edge[0][2]), F(edge[1])]]
    ov = np.concatenate([np.array(rows, np.float32).reshape(-1), np.array([F(1.0) if r else F(0.0) for r in road], np.float32)])
    assert ov.size == 260 * 4 + 256
    assert len(tops) in (0, width)
    return ov, np.array(tops if tops else [NO_HOOD] * width, np.uint32)


def grid_for(n):
    return min(max(-(-n // BLOCK), 1), 1 << 30)


def gpu_blend(under, over, a):
    """overlay_blend: (u8)roundf(under * (1 + -a) + over * a), each operation rounded to f32."""
    v = round_half_away(F(F(F(under) * F(F(1.0) + -a)) + F(over * a)))
    assert 0 <= v <= 255, f"cast of {v} to u8 out of range"
    return v


def gpu_yuv(c):
    return [F(F(F(F(16.0) + F(F(0.256788) * c[0])) + F(F(0.504129) * c[1])) + F(F(0.097906) * c[2])),
            F(F(F(F(128.0) + -F(F(0.148223) * c[0])) + -F(F(0.290993) * c[1])) + F(F(0.439216) * c[2])),
            F(F(F(F(128.0) + F(F(0.439216) * c[0])) + -F(F(0.367788) * c[1])) + -F(F(0.071427) * c[2]))]


def annotate_frame(frame, fw, fh, stride, fmt, classes, ov, tops, grid, writes):
    """annotate_frame, one (block, thread) at a time; `writes` counts stores per byte."""
    total = fw * fh

    def store(i, v):
        frame[i] = v
        writes[i] += 1

    for block in range(grid):
        for tid in range(BLOCK):
            i = block * BLOCK + tid
            while i < total:
                x, y = i % fw, i // fw
                i += grid * BLOCK
                # overlay_tint
                pic = ov[258 * 4:259 * 4]
                if F(x) < pic[0] or F(y) < pic[1] or F(x) >= pic[2] or F(y) >= pic[3]:
                    continue
                if np.uint32(y) >= tops[x]:
                    entry = 257
                else:
                    cls = int(classes[y * fw + x])
                    if cls == 255:
                        def road_at(nx, ny):
                            if F(nx) < pic[0] or F(ny) < pic[1] or F(nx) >= pic[2] or F(ny) >= pic[3]:
                                return False
                            return ov[260 * 4 + int(classes[ny * fw + nx])] > 0.0
                        near = ov[259 * 4 + 3] > 0.0 and any(
                            (x >= r and road_at(x - r, y)) or road_at(x + r, y) or (y >= r and road_at(x, y - r)) or road_at(x, y + r)
                            for r in (3, 8))
                        if near:
                            entry = 259
                        elif ((x // 4 + y // 4) & 1) != 0:
                            continue
                        else:
                            entry = 256
                    else:
                        entry = cls
                t = ov[entry * 4:entry * 4 + 4]
                if not t[3] > 0.0:
                    continue
                c, a = t[:3], t[3]
                if fmt == 2:
                    yuv = gpu_yuv(c)
                    luma = y * stride + x
                    store(luma, gpu_blend(frame[luma], yuv[0], a))
                    if (x & 1) == 0 and (y & 1) == 0:
                        uv = stride * fh + (y // 2) * stride + x
                        store(uv, gpu_blend(frame[uv], yuv[1], a))
                        store(uv + 1, gpu_blend(frame[uv + 1], yuv[2], a))
                else:
                    p = y * stride + x * (4 if fmt == 1 else 3)
                    for k in range(3):
                        store(p + k, gpu_blend(frame[p + k], c[k], a))


# ---- Cases ----

STYLE = dict(road_classes=[1], road_colour=(255, 0, 200), road_alpha=0.45, full_palette=None,
             unknown_colour=(255, 220, 0), show_unknown=True, road_edge=False, hood_colour=(0, 150, 255))
PALETTE = [(10, 200, 30), (200, 10, 30), (30, 10, 200), (255, 255, 255), (0, 0, 0)]


def case(name, fmt, w, h, pad, seed, hood="random", bars=(0, 0, 0, 0), **style):
    rng = np.random.default_rng(seed)
    style = {**STYLE, **style}
    bpp = {0: 3, 1: 4, 2: 1}[fmt]
    stride = w * bpp + pad
    rows = h * 3 // 2 if fmt == 2 else h
    padded = rng.integers(0, 256, rows * stride).astype(np.uint8)
    # Extremes, where a wrong rounding or cast would show.
    padded[rng.random(padded.size) < 0.1] = 0
    padded[rng.random(padded.size) < 0.1] = 255
    packed = padded.reshape(rows, stride)[:, :w * bpp].reshape(-1).copy()
    classes = rng.integers(0, 6, w * h).astype(np.uint8)
    classes[rng.random(w * h) < 0.3] = UNKNOWN
    classes[rng.random(w * h) < 0.05] = 200
    hood_size = (w, h)
    if hood == "none":
        tops = None
    elif hood == "empty":
        tops = [h] * w
    elif hood == "mismatched":
        tops, hood_size = [0] * w, (w, h + 2)
    else:
        tops = [min(int(t), h) for t in rng.integers(0, h + 2, w)]
        tops[0], tops[-1] = 0, h
    overlay = frame_overlay(style, tops, hood_size, w, h, bars)

    want = [int(v) for v in packed]
    if fmt == 2:
        tint_nv12(want, classes, w, h, overlay)
    else:
        draw_overlay(want, bpp, classes, w, h, overlay)
    want = np.array(want, np.int64)

    ok = True
    diffs = []
    ov, dev_tops = stage_overlay(overlay, w)
    for grid in (grid_for(w * h), 3):
        got = padded.astype(np.int64)
        writes = np.zeros(padded.size, np.int64)
        annotate_frame(got, w, h, stride, fmt, classes, ov, dev_tops, grid, writes)
        got2 = got.reshape(rows, stride)
        diff = int(np.abs(got2[:, :w * bpp].reshape(-1) - want).max())
        pad_same = bool((got2[:, w * bpp:] == padded.reshape(rows, stride)[:, w * bpp:]).all())
        ok &= diff == 0 and pad_same and writes.max() <= 1
        diffs.append(diff)
        if not pad_same:
            print(f"  {name}: padding written (grid {grid})")
        if writes.max() > 1:
            print(f"  {name}: a byte written by {writes.max()} threads (grid {grid})")
    tinted = int((want != packed).sum())
    print(f"{name}: {['RGB', 'RGBA', 'NV12'][fmt]} {w}x{h} stride {stride}, {tinted} bytes tinted: "
          f"max abs diff {max(diffs)} {'ok' if ok else 'MISMATCH'}")
    return ok and (tinted > 0) == style.get("expect_tint", True)


def main():
    cases = [
        case("rgb hood unknown", 0, 37, 23, 0, 1),
        case("rgb one pixel wide", 0, 1, 17, 0, 2),
        case("rgb 1x1 no hood", 0, 1, 1, 5, 3, hood="none", road_classes=[0, 1, 2, 3, 4, 5]),
        case("rgb odd padded palette", 0, 19, 7, 2, 4, hood="none", full_palette=PALETTE),
        case("rgba padded palette no hood", 1, 41, 29, 12, 5, hood="none", full_palette=PALETTE),
        case("rgba padded hood no unknown", 1, 41, 29, 12, 6, show_unknown=False),
        case("rgba odd hood palette unknown", 1, 33, 17, 4, 7, full_palette=PALETTE[:2]),
        case("rgba alpha 1, classes 255 and 300", 1, 24, 16, 0, 8, road_alpha=1.0, road_classes=[1, 255, 300]),
        case("rgba alpha 0, empty palette", 1, 24, 16, 8, 9, road_alpha=0.0, full_palette=[]),
        case("rgba hood of other size", 1, 24, 16, 8, 10, hood="mismatched"),
        case("nv12 padded hood unknown palette", 2, 40, 26, 8, 11, full_palette=PALETTE),
        case("nv12 packed no hood no unknown", 2, 64, 32, 0, 12, hood="none", show_unknown=False),
        case("nv12 padded hood, no unknown", 2, 30, 18, 2, 13, show_unknown=False),
        case("nv12 empty hood, alpha 1", 2, 16, 12, 16, 14, hood="empty", road_alpha=1.0),
        case("rgba pillarbox, hood", 1, 41, 29, 12, 15, bars=(5, 6, 0, 0)),
        case("rgb letterbox, no hood", 0, 37, 23, 0, 16, hood="none", bars=(0, 0, 3, 4)),
        case("nv12 windowbox, hood, palette", 2, 40, 26, 8, 17, bars=(3, 5, 2, 3), full_palette=PALETTE),
        case("nv12 odd bars, unknown", 2, 30, 18, 2, 18, bars=(1, 1, 1, 1)),
        case("rgba bars over the whole frame", 1, 24, 16, 8, 19, bars=(20, 10, 0, 0), expect_tint=False),
        case("rgba road edge (the default), no unknown", 1, 41, 29, 12, 20, road_edge=True, show_unknown=False),
        case("rgb road edge and unknown, bars", 0, 37, 23, 0, 21, road_edge=True, bars=(4, 2, 3, 1)),
        case("nv12 road edge, hood, palette", 2, 40, 26, 8, 22, road_edge=True, full_palette=PALETTE),
        case("rgba road edge, road alpha 0", 1, 24, 16, 8, 23, road_edge=True, road_alpha=0.0),
        case("nv12 road edge, road class 255", 2, 30, 18, 2, 24, road_edge=True, road_classes=[255], show_unknown=False),
    ]
    sys.exit(0 if all(cases) else 1)


if __name__ == "__main__":
    main()

# Emulates kernels/conv.cu's dwconv3x3_gelu_tiled thread by thread (grid,
# 4-channel groups, the 8-row strip and its sliding 3x3 window) and compares
# it with a plain depthwise 3x3 + bias + GELU. Checks the kernel's index
# arithmetic and boundary handling on a machine without a GPU (numpy only):
#   python3 tools/emulate_dwconv.py
import math
import numpy as np

DW_ROWS, DW_BLOCK = 8, 128  # kernels/conv.cu, src/backend/cuda/mod.rs


def gelu(v):
    return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))


def reference(x, wt, bias, h, w, c):
    xi = x.reshape(h, w, c)
    k = wt.reshape(3, 3, c)
    pad = np.zeros((h + 2, w + 2, c))
    pad[1:-1, 1:-1] = xi
    acc = np.broadcast_to(bias, (h, w, c)).copy()
    for ky in range(3):
        for kx in range(3):
            acc += pad[ky:ky + h, kx:kx + w] * k[ky, kx]
    return gelu(acc).reshape(-1)


def tiled(x, wt, bias, h, w, c):
    assert c % 4 == 0
    y = np.full(h * w * c, np.nan)
    groups = c >> 2
    grid_x = -(-(groups * w) // DW_BLOCK)
    grid_y = -(-h // DW_ROWS)
    ld4 = lambda buf, at: buf[at:at + 4]
    for by in range(grid_y):
        for bx in range(grid_x):
            for tx in range(DW_BLOCK):
                t = bx * DW_BLOCK + tx
                if t >= groups * w:
                    continue
                cg, px = t % groups, t // groups
                ch = cg << 2
                y0 = by * DW_ROWS
                if y0 >= h:
                    continue
                k = [ld4(wt, j * c + ch) for j in range(9)]
                b = ld4(bias, ch)
                win = [[np.zeros(4) for _ in range(3)] for _ in range(3)]

                def load_row(r, yy):
                    for dx in range(3):
                        xx = px + dx - 1
                        inside = 0 <= yy < h and 0 <= xx < w
                        win[r][dx] = ld4(x, (yy * w + xx) * c + ch).copy() if inside else np.zeros(4)

                load_row(0, y0 - 1)
                load_row(1, y0)
                for yy in range(y0, min(y0 + DW_ROWS, h)):
                    load_row(2, yy + 1)
                    acc = b.copy()
                    for r in range(3):
                        for dx in range(3):
                            acc = acc + win[r][dx] * k[r * 3 + dx]
                    at = (yy * w + px) * c + ch
                    assert np.all(np.isnan(y[at:at + 4])), f"output {at} written twice"
                    y[at:at + 4] = gelu(acc)
                    for dx in range(3):
                        win[0][dx] = win[1][dx]
                        win[1][dx] = win[2][dx]
    return y


rng = np.random.default_rng(0)
worst = 0.0
for h, w, c in [(1, 37, 8), (29, 1, 12), (13, 29, 4), (9, 7, 36), (16, 16, 16), (8, 3, 132), (21, 40, 64)]:
    x, wt, bias = rng.standard_normal(h * w * c), rng.standard_normal(9 * c), rng.standard_normal(c)
    got, want = tiled(x, wt, bias, h, w, c), reference(x, wt, bias, h, w, c)
    assert not np.isnan(got).any(), f"{h}x{w}x{c}: outputs never written"
    err = np.abs(got - want).max()
    worst = max(worst, err)
    print(f"{h}x{w}x{c}: max |tiled - reference| = {err:.2e}")
    assert err < 1e-9, f"{h}x{w}x{c}: mismatch"
print(f"ok: every output written once and equal to the reference (worst {worst:.1e})")

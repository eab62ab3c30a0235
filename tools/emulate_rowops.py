#!/usr/bin/env python3
"""Emulates the chunked CUDA kernels of issue 9 thread by thread and compares
them with the scalar kernels they replace:

  * layer_norm_vec{1,2,4} (kernels/layernorm.cu): one warp per row, lane l
    holding 16-byte chunks l, l+32, ... in registers; zero chunks past the
    row; warp sums; the host planner `layer_norm_chunks` (backend.rs).
  * im2col_vec (kernels/conv.cu): one 16-byte chunk of the column matrix per
    thread, grid-stride, chunk inside one pixel's channels or in the padding.

Element sizes 2 (fp16/bf16) and 4 (f32); shapes cover every SegFormer width,
rows that are not whole chunks (the planner must refuse them), strided and
padded convolutions, and a grid smaller than the work (grid-stride loops).

    python3 tools/emulate_rowops.py      # exit 0 when every case matches
"""
import sys

import numpy as np

BLOCK = 256
WARPS = 8


def layer_norm_chunks(dim, elem_bytes):
    per_chunk = 16 // elem_bytes
    if dim == 0 or dim % per_chunk:
        return None
    lanes = -(-(dim // per_chunk) // 32)
    return {1: 1, 2: 2, 3: 4, 4: 4}.get(lanes)


def layer_norm_ref(x, g, b):
    m = x.mean(axis=1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g + b


def layer_norm_vec(x, g, b, chunks_per_lane, elem_bytes):
    rows, dim = x.shape
    E = 16 // elem_bytes
    chunks = dim // E
    flat = x.reshape(-1)
    y = np.full(rows * dim, np.nan)
    blocks = -(-rows // WARPS)
    for bx in range(blocks):
        # Warp by warp (row = block * WARPS + warp), so the shuffles are sums over lanes.
        for warp in range(WARPS):
            row = bx * WARPS + warp
            if row >= rows:
                continue
            base = row * dim  # uint4 index c covers elements base + c*E .. + E
            v = np.zeros((32, chunks_per_lane, E))
            for lane in range(32):
                for j in range(chunks_per_lane):
                    c = lane + 32 * j
                    if c < chunks:
                        v[lane, j] = flat[base + c * E: base + (c + 1) * E]
            mean = v.sum() / dim
            sq = 0.0
            for lane in range(32):
                for j in range(chunks_per_lane):
                    if lane + 32 * j < chunks:
                        sq += ((v[lane, j] - mean) ** 2).sum()
            inv = 1.0 / np.sqrt(sq / dim + 1e-5)
            for lane in range(32):
                for j in range(chunks_per_lane):
                    c = lane + 32 * j
                    if c >= chunks:
                        continue
                    gc, bc = g[c * E:(c + 1) * E], b[c * E:(c + 1) * E]
                    y[base + c * E: base + (c + 1) * E] = (v[lane, j] - mean) * inv * gc + bc
    return y.reshape(rows, dim)


def im2col_ref(x, h, w, c_in, k, stride, pad, out_h, out_w, ld):
    cols = np.zeros(out_h * out_w * ld)
    for p in range(out_h * out_w):
        oy, ox = divmod(p, out_w)
        for r in range(k * k * c_in):
            ci, kx, ky = r % c_in, (r // c_in) % k, r // (c_in * k)
            iy, ix = oy * stride - pad + ky, ox * stride - pad + kx
            if 0 <= iy < h and 0 <= ix < w:
                cols[p * ld + r] = x[(iy * w + ix) * c_in + ci]
    return cols


def im2col_vec(x, h, w, c_in, k, stride, pad, out_h, out_w, ld, elem_bytes, grid):
    E = 16 // elem_bytes
    kk = k * k * c_in
    ld_chunks = ld // E
    total = out_h * out_w * ld_chunks
    cols = np.full(out_h * out_w * ld, np.nan)
    for t in range(grid * BLOCK):
        i = t
        while i < total:
            p = i // ld_chunks
            r = (i - p * ld_chunks) * E
            v = np.zeros(E)
            if r < kk:
                ci, kx, ky = r % c_in, (r // c_in) % k, r // (c_in * k)
                ox, oy = p % out_w, p // out_w
                iy, ix = oy * stride - pad + ky, ox * stride - pad + kx
                if 0 <= iy < h and 0 <= ix < w:
                    src = (iy * w + ix) * c_in + ci
                    assert src % E == 0, "unaligned 16-byte load"
                    v = x[src:src + E]
            cols[i * E:(i + 1) * E] = v
            i += grid * BLOCK
    return cols


def main():
    rng = np.random.default_rng(7)
    worst = 0.0
    failed = False
    for elem in (2, 4):
        for dim in (32, 64, 160, 256, 320, 512, 1000, 1024, 36, 2056, 2048):
            plan = layer_norm_chunks(dim, elem)
            if plan is None:
                print(f"layer_norm elem {elem} dim {dim}: scalar kernel (planner refuses)")
                if dim % (16 // elem) == 0 and dim // (16 // elem) <= 128:
                    print("  FAIL: a row that fits was refused")
                    failed = True
                continue
            rows = 13
            x = rng.standard_normal((rows, dim)) * 3 + 1
            g, b = rng.standard_normal(dim), rng.standard_normal(dim)
            ours = layer_norm_vec(x, g, b, plan, elem)
            err = np.abs(ours - layer_norm_ref(x, g, b)).max()
            worst = max(worst, err)
            print(f"layer_norm elem {elem} dim {dim}: {plan} chunk(s)/lane, max abs err {err:.2e}")
            if not err < 1e-9:
                failed = True
    for elem in (2, 4):
        E = 16 // elem
        for (h, w, c_in, k, stride, pad, grid) in [
            (19, 23, 32, 3, 2, 1, 1000), (24, 40, 64, 8, 8, 0, 1000), (17, 13, 160, 3, 2, 1, 3),
            (11, 9, 12, 3, 2, 1, 1000), (5, 7, 8, 7, 4, 3, 1), (1, 1, 16, 3, 2, 1, 1000),
        ]:
            if c_in % E:
                print(f"im2col elem {elem} c_in {c_in}: scalar kernel")
                continue
            out_h = (h + 2 * pad - k) // stride + 1
            out_w = (w + 2 * pad - k) // stride + 1
            ld = -(-(k * k * c_in) // 8) * 8
            x = rng.standard_normal(h * w * c_in)
            ours = im2col_vec(x, h, w, c_in, k, stride, pad, out_h, out_w, ld, elem, grid)
            ref = im2col_ref(x, h, w, c_in, k, stride, pad, out_h, out_w, ld)
            ok = not np.isnan(ours).any() and np.array_equal(ours, ref)
            print(f"im2col elem {elem} {h}x{w}x{c_in} k{k} s{stride} p{pad} grid {grid}: {'exact' if ok else 'MISMATCH'}")
            failed |= not ok
    print(f"worst layer norm error {worst:.2e}")
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

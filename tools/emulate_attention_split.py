# Emulates kernels/attention_split.cu (split-KV flash attention and its
# combine) lane by lane in numpy, with the kernel's own index arithmetic:
# cp.async tile copies (zero fill past n_k, deferred until wait_group, with a
# check that no buffer is read while a copy into it is in flight), ldmatrix
# x4 / x4.trans fragment distribution (PTX ISA: lanes 8i..8i+7 address the
# rows of matrix i; lane l gets row l/4, columns 2(l%4) and +1, of each
# matrix, or of its transpose), mma.m16n8k16 (layout as
# tools/emulate_flash_attention.py), the base-2 online softmax with P and y
# rounded to fp16 as the kernel packs them, the split partials in f32, and
# the combine. Every global and shared access is bounds-checked, shared rows
# are checked for 16-byte alignment and ldmatrix phases for bank conflicts.
# Compared with plain softmax attention in float64 on the same fp16 inputs;
# exits 1 when the error (max |y - ref| / max |ref|) exceeds 1e-3.
#   python3 tools/emulate_attention_split.py
import sys
import numpy as np

WARPS, BQ, BK, PAD = 4, 64, 64, 8
THREADS = WARPS * 32
LANES = np.arange(32)
G, T = LANES >> 2, LANES & 3
f16 = lambda x: np.asarray(x, np.float64).astype(np.float16).astype(np.float64)
f32 = lambda x: np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


class Mem:
    """A flat buffer whose every access is bounds-checked (numpy would wrap negative indexes)."""

    def __init__(self, name, values):
        self.name, self.v = name, values

    def idx(self, off, n=1):
        off = np.asarray(off)
        assert (off >= 0).all() and (off + n <= len(self.v)).all(), f"{self.name}: out of bounds {off.min()}..{off.max() + n} of {len(self.v)}"
        return off

    def read(self, off, n=1):
        off = self.idx(off, n)
        return self.v[off[..., None] + np.arange(n)] if n > 1 else self.v[off]

    def write(self, off, vals):
        self.v[self.idx(off)] = vals


def mma(d, a, b):
    """d [32,4] += A B: a [32,4,2] (a0..a3, two halves each), b [32,2,2] (b0, b1)."""
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for h in range(2):
        A[G, 2 * T + h] = a[:, 0, h]; A[G + 8, 2 * T + h] = a[:, 1, h]
        A[G, 2 * T + 8 + h] = a[:, 2, h]; A[G + 8, 2 * T + 8 + h] = a[:, 3, h]
        B[2 * T + h, G] = b[:, 0, h]; B[2 * T + 8 + h, G] = b[:, 1, h]
    C = A @ B
    d[:, 0] += C[G, 2 * T]; d[:, 1] += C[G, 2 * T + 1]
    d[:, 2] += C[G + 8, 2 * T]; d[:, 3] += C[G + 8, 2 * T + 1]


def ldmatrix_x4(smem, addr, trans):
    """addr: [32] element offsets into smem (b16). Returns r [32, 4, 2]."""
    addr = np.asarray(addr)
    assert (addr % 8 == 0).all(), "ldmatrix rows must be 16-byte aligned"
    for i in range(4):
        # One phase per matrix: 8 rows of 16 bytes, conflict-free when they
        # land on 8 different groups of 4 banks.
        groups = (addr[8 * i:8 * i + 8] * 2 // 16) % 8
        assert len(set(groups.tolist())) == 8, f"ldmatrix bank conflict: 16-byte groups {groups.tolist()}"
    rows = smem.read(addr, 8)  # [32, 8]: row lane%8 of matrix lane/8
    M = rows.reshape(4, 8, 8)
    r = np.zeros((32, 4, 2))
    for i in range(4):
        m = M[i].T if trans else M[i]
        r[:, i, 0] = m[G, 2 * T]; r[:, i, 1] = m[G, 2 * T + 1]
    return r


class Pipeline:
    """cp.async groups of the block: copies land at wait_group, not when issued."""

    def __init__(self):
        self.groups, self.current = [], []

    def cp_async16(self, smem, dst, gmem, src, nbytes):
        assert dst % 8 == 0 and src % 8 == 0, "cp.async 16 needs 16-byte aligned addresses"
        smem.idx(dst, 8)
        gmem.idx(src, 8)  # the address must be valid even when nothing is read
        vals = gmem.read(src, 8) if nbytes == 16 else np.zeros(8)
        assert nbytes in (0, 16)
        self.current.append((smem, dst, vals))

    def commit(self):
        self.groups.append(self.current); self.current = []

    def wait(self, n):
        while len(self.groups) > n:
            for smem, dst, vals in self.groups.pop(0):
                smem.v[dst:dst + 8] = vals

    def check_not_pending(self, smem):
        for grp in self.groups + [self.current]:
            assert all(s is not smem for s, _, _ in grp), "a buffer is read while a copy into it is in flight"


def load_tile(pipe, ks, vs, kv, k0, n_k, C, head, HD):
    CHUNKS = HD // 8
    assert BK * CHUNKS % THREADS == 0
    for tid in range(THREADS):
        for r in range(BK * CHUNKS // THREADS):
            i = r * THREADS + tid
            key, c8 = i // CHUNKS, (i % CHUNKS) * 8
            k = k0 + key
            nbytes = 16 if k < n_k else 0
            row = min(k, n_k - 1) * 2 * C + head * HD + c8
            pipe.cp_async16(ks, key * (HD + PAD) + c8, kv, row, nbytes)
            pipe.cp_async16(vs, key * (HD + PAD) + c8, kv, row + C, nbytes)


def flash_split_block(bx, head, split, splits, q, kv, y, ws, n_q, n_k, heads, tps, HD):
    C = heads * HD
    scale_log2 = np.float32(np.log2(np.e) / np.sqrt(HD))
    stride = HD + PAD
    bufs = [(Mem("ks0", np.full(BK * stride, np.nan)), Mem("vs0", np.full(BK * stride, np.nan))),
            (Mem("ks1", np.full(BK * stride, np.nan)), Mem("vs1", np.full(BK * stride, np.nan)))]
    k_begin = split * tps * BK
    k_end = min(n_k, k_begin + tps * BK)
    tiles = (k_end - k_begin + BK - 1) // BK if k_end > k_begin else 0
    pipe = Pipeline()
    if tiles > 0:
        load_tile(pipe, *bufs[0], kv, k_begin, n_k, C, head, HD)
    pipe.commit()

    warps = []
    for warp in range(WARPS):
        r0 = bx * BQ + warp * 16 + G; r1 = r0 + 8
        qa = np.zeros((HD // 16, 32, 4, 2))
        for kk in range(HD // 16):
            c = head * HD + kk * 16 + T * 2
            for reg, (r, cc) in enumerate([(r0, c), (r1, c), (r0, c + 8), (r1, c + 8)]):
                ok = r < n_q
                off = np.where(ok, r * C + cc, 0)
                qa[kk, :, reg] = np.where(ok[:, None], q.read(off, 2), 0.0)
        warps.append(dict(r0=r0, r1=r1, qa=qa, o=np.zeros((HD // 8, 32, 4)),
                          m0=np.full(32, -np.inf), m1=np.full(32, -np.inf), l0=np.zeros(32), l1=np.zeros(32)))
    lrow, lmat = LANES & 7, LANES >> 3

    def quad(v, op):
        v = v.reshape(8, 4)
        return np.repeat(op(v, axis=1), 4)

    for it in range(tiles):
        buf, k0 = it & 1, k_begin + it * BK
        if it + 1 < tiles:
            load_tile(pipe, *bufs[buf ^ 1], kv, k0 + BK, n_k, C, head, HD)
        pipe.commit()
        pipe.wait(1)
        ks, vs = bufs[buf]
        pipe.check_not_pending(ks); pipe.check_not_pending(vs)
        for w in warps:
            s = np.zeros((BK // 8, 32, 4))
            for j in range(BK // 8):
                for h in range(HD // 32):
                    b = ldmatrix_x4(ks, (j * 8 + lrow) * stride + h * 32 + lmat * 8, trans=False)
                    mma(s[j], w["qa"][2 * h], b[:, 0:2])
                    mma(s[j], w["qa"][2 * h + 1], b[:, 2:4])
            s = f32(s)
            mx0, mx1 = w["m0"].copy(), w["m1"].copy()
            for j in range(BK // 8):
                for e in range(4):
                    key = k0 + j * 8 + T * 2 + (e & 1)
                    s[j][:, e] = np.where(key < k_end, f32(s[j][:, e] * scale_log2), -np.inf)
                mx0 = np.maximum(mx0, np.maximum(s[j][:, 0], s[j][:, 1]))
                mx1 = np.maximum(mx1, np.maximum(s[j][:, 2], s[j][:, 3]))
            mx0, mx1 = quad(mx0, np.max), quad(mx1, np.max)
            assert np.isfinite(mx0).all() and np.isfinite(mx1).all(), "a split's first tile holds a valid key"
            c0, c1 = np.exp2(w["m0"] - mx0), np.exp2(w["m1"] - mx1)
            w["m0"], w["m1"] = mx0, mx1
            s[:, :, 0:2] = np.exp2(s[:, :, 0:2] - mx0[None, :, None])
            s[:, :, 2:4] = np.exp2(s[:, :, 2:4] - mx1[None, :, None])
            w["l0"] = f32(w["l0"] * c0 + s[:, :, 0:2].sum(axis=(0, 2)))
            w["l1"] = f32(w["l1"] * c1 + s[:, :, 2:4].sum(axis=(0, 2)))
            w["o"][:, :, 0:2] *= c0[None, :, None]
            w["o"][:, :, 2:4] *= c1[None, :, None]
            p = f16(s)  # pack2<T>: P enters the mma in the storage type
            for kk in range(BK // 16):
                pa = np.stack([p[2 * kk][:, 0:2], p[2 * kk][:, 2:4], p[2 * kk + 1][:, 0:2], p[2 * kk + 1][:, 2:4]], axis=1)
                for np_ in range(HD // 16):
                    b = ldmatrix_x4(vs, (kk * 16 + (lmat & 1) * 8 + lrow) * stride + np_ * 16 + (lmat >> 1) * 8, trans=True)
                    mma(w["o"][2 * np_], pa, b[:, 0:2])
                    mma(w["o"][2 * np_ + 1], pa, b[:, 2:4])
            w["o"] = f32(w["o"])
    pipe.wait(0)
    assert not pipe.groups and not pipe.current

    for w in warps:
        l0, l1 = quad(w["l0"], np.sum), quad(w["l1"], np.sum)
        r0, r1, o = w["r0"], w["r1"], w["o"]
        if splits == 1:
            for n in range(HD // 8):
                c = head * HD + n * 8 + T * 2
                for r, (e0, e1), l in ((r0, (0, 1), l0), (r1, (2, 3), l1)):
                    ok = r < n_q
                    y.write(np.stack([r * C + c, r * C + c + 1])[:, ok], np.stack([f16(o[n][ok, e0] / l[ok]), f16(o[n][ok, e1] / l[ok])]))
            continue
        wo = split * n_q * C
        wml = splits * n_q * C + split * n_q * heads * 2
        for n in range(HD // 8):
            c = head * HD + n * 8 + T * 2
            for r, (e0, e1) in ((r0, (0, 1)), (r1, (2, 3))):
                ok = r < n_q
                ws.write(wo + r[ok] * C + c[ok], f32(o[n][ok, e0]))
                ws.write(wo + r[ok] * C + c[ok] + 1, f32(o[n][ok, e1]))
        for r, m, l in ((r0, w["m0"], l0), (r1, w["m1"], l1)):
            ok = (T == 0) & (r < n_q)
            ws.write(wml + (r[ok] * heads + head) * 2, m[ok])
            ws.write(wml + (r[ok] * heads + head) * 2 + 1, l[ok])


def combine(ws, y, n_q, heads, hd, splits, block=256):
    # Every thread of the grid at once, with the kernel's index arithmetic.
    C = heads * hd; pairs = C // 2
    grid = (n_q * pairs + block - 1) // block
    idx = np.arange(grid * block)
    idx = idx[idx < n_q * pairs]
    row = idx // pairs; c = (idx % pairs) * 2; head = c // hd
    ml = splits * n_q * C + (row * heads + head) * 2
    ml_stride = n_q * heads * 2
    m = np.full(len(idx), -np.inf)
    for s in range(splits):
        m = np.maximum(m, ws.read(ml + s * ml_stride))
    l = np.zeros(len(idx)); o0 = np.zeros(len(idx)); o1 = np.zeros(len(idx))
    for s in range(splits):
        w = np.exp2(ws.read(ml + s * ml_stride) - m)
        o = (s * n_q + row) * C + c
        l += w * ws.read(ml + s * ml_stride + 1)
        o0 += w * ws.read(o); o1 += w * ws.read(o + 1)
    y.write(row * C + c, f16(o0 / l)); y.write(row * C + c + 1, f16(o1 / l))


def plan_tiles(n_k, splits):
    """The host's rule (src/backend/cuda/backend.rs plan_split): whole tiles per split, no split empty."""
    key_tiles = (n_k + BK - 1) // BK
    tps = (key_tiles + splits - 1) // splits
    return tps, (key_tiles + tps - 1) // tps


def workspace_floats(n_q, heads, hd, splits):
    return 0 if splits == 1 else splits * n_q * (heads * hd + 2 * heads)


def attention(q, kv, n_q, n_k, heads, HD, tps, splits):
    C = heads * HD
    qm, kvm = Mem("q", q.ravel().copy()), Mem("kv", kv.ravel().copy())
    y = Mem("y", np.full(n_q * C, np.nan))
    ws = Mem("ws", np.full(workspace_floats(n_q, heads, HD, splits), np.nan))
    for split in range(splits):
        for head in range(heads):
            for bx in range((n_q + BQ - 1) // BQ):
                flash_split_block(bx, head, split, splits, qm, kvm, y, ws, n_q, n_k, heads, tps, HD)
    if splits > 1:
        combine(ws, y, n_q, heads, HD, splits)
    assert not np.isnan(y.v).any(), "some output was never written"
    return y.v.reshape(n_q, C)


def ref(q, kv, n_q, n_k, heads, HD):
    C = heads * HD; y = np.zeros((n_q, C))
    for h in range(heads):
        Q = q[:, h * HD:(h + 1) * HD]; K = kv[:, h * HD:(h + 1) * HD]; V = kv[:, C + h * HD:C + (h + 1) * HD]
        S = Q @ K.T / np.sqrt(HD); S -= S.max(1, keepdims=True); P = np.exp(S); P /= P.sum(1, keepdims=True)
        y[:, h * HD:(h + 1) * HD] = P @ V
    return y


# (hd, n_q, n_k, heads, splits asked, tiles per split forced or None, what it covers)
CASES = [
    (32, 70, 576, 1, 1, None, "one split writes y itself; partial query tile"),
    (64, 70, 576, 2, 2, None, "9 tiles as 5 + 4"),
    (64, 20, 1024, 5, 3, None, "16 tiles as 6 + 6 + 4"),
    (32, 33, 1024, 8, 4, None, "four splits of 4 tiles"),
    (64, 17, 1000, 2, 3, None, "a split ending in a partial tile (960..1000)"),
    (32, 100, 100, 2, 2, None, "one-tile splits, the second partial"),
    (64, 5, 17, 1, 1, None, "n_k below one tile"),
    (32, 64, 1, 5, 1, None, "a single key; whole query tile"),
    (64, 1, 1, 8, 1, None, "one query, one key"),
    (32, 30, 100, 1, 3, 1, "an empty third split (the host never plans one; the kernel tolerates it)"),
]

rng = np.random.default_rng(0)
worst = 0.0
for hd, n_q, n_k, heads, asked, forced, what in CASES:
    tps, splits = plan_tiles(n_k, asked)
    if forced is not None:
        tps, splits = forced, asked
    C = heads * hd
    # fp16 inputs, with an outlier scale so the softmax is far from uniform.
    q = f16(rng.standard_normal((n_q, C)) * 1.5); kv = f16(rng.standard_normal((n_k, 2 * C)))
    got = attention(q, kv, n_q, n_k, heads, hd, tps, splits)
    want = ref(q, kv, n_q, n_k, heads, hd)
    err = np.abs(got - want).max() / np.abs(want).max()
    worst = max(worst, err)
    print(f"hd {hd} n_q {n_q} n_k {n_k} heads {heads} splits {splits} (tiles/split {tps}): max rel error {err:.2e}  [{what}]")
print(f"worst {worst:.2e} (bound 1e-3)")
sys.exit(0 if worst <= 1e-3 else 1)

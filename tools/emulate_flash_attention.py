# Emulates kernels/attention.cu's flash kernel lane by lane, with the mma.m16n8k16
# fragment layouts of the PTX ISA, and compares it with plain softmax attention.
# Checks the kernel's index arithmetic on a machine without a GPU (numpy only):
#   python3 tools/emulate_flash_attention.py
import numpy as np
rng = np.random.default_rng(0)

def mma(d, a, b):
    # d: [32][4] floats per lane; a: [32][8] halves (a0..a7), b: [32][4] halves (b0..b3)
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        A[g, t*2+0], A[g, t*2+1] = a[lane][0], a[lane][1]
        A[g+8, t*2+0], A[g+8, t*2+1] = a[lane][2], a[lane][3]
        A[g, t*2+8], A[g, t*2+9] = a[lane][4], a[lane][5]
        A[g+8, t*2+8], A[g+8, t*2+9] = a[lane][6], a[lane][7]
        B[t*2+0, g], B[t*2+1, g] = b[lane][0], b[lane][1]
        B[t*2+8, g], B[t*2+9, g] = b[lane][2], b[lane][3]
    C = A @ B
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        d[lane][0] += C[g, t*2]; d[lane][1] += C[g, t*2+1]
        d[lane][2] += C[g+8, t*2]; d[lane][3] += C[g+8, t*2+1]

def flash(q, kv, n_q, n_k, heads, HD, BK=64, WARPS=4):
    C = heads * HD
    y = np.zeros((n_q, C))
    scale_log2 = np.log2(np.e) / np.sqrt(HD)
    BQ = 16 * WARPS
    for bx in range((n_q + BQ - 1) // BQ):
        for head in range(heads):
            for warp in range(WARPS):
                r0s = [bx*BQ + warp*16 + (lane >> 2) for lane in range(32)]
                qa = [[[0.0]*8 for _ in range(32)] for _ in range(HD//16)]
                for kk in range(HD//16):
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        r0 = r0s[lane]; r1 = r0 + 8
                        c = head*HD + kk*16 + t*2
                        get = lambda r, c: (q[r, c], q[r, c+1]) if r < n_q else (0.0, 0.0)
                        qa[kk][lane][0:2] = get(r0, c); qa[kk][lane][2:4] = get(r1, c)
                        qa[kk][lane][4:6] = get(r0, c+8); qa[kk][lane][6:8] = get(r1, c+8)
                o = [[[0.0]*4 for _ in range(32)] for _ in range(HD//8)]
                m0 = [-np.inf]*32; m1 = [-np.inf]*32; l0 = [0.0]*32; l1 = [0.0]*32
                for k0 in range(0, n_k, BK):
                    ks = np.zeros((BK, HD)); vts = np.zeros((HD, BK))
                    for key in range(BK):
                        if k0 + key < n_k:
                            ks[key] = kv[k0+key, head*HD:(head+1)*HD]
                            vts[:, key] = kv[k0+key, C + head*HD: C + (head+1)*HD]
                    s = [[[0.0]*4 for _ in range(32)] for _ in range(BK//8)]
                    for j in range(BK//8):
                        for kk in range(HD//16):
                            b = []
                            for lane in range(32):
                                g, t = lane >> 2, lane & 3
                                b.append([ks[j*8+g, kk*16+t*2], ks[j*8+g, kk*16+t*2+1], ks[j*8+g, kk*16+t*2+8], ks[j*8+g, kk*16+t*2+9]])
                            mma(s[j], qa[kk], b)
                    mx0 = list(m0); mx1 = list(m1)
                    for lane in range(32):
                        t = lane & 3
                        for j in range(BK//8):
                            for e in range(4):
                                key = k0 + j*8 + t*2 + (e & 1)
                                s[j][lane][e] = s[j][lane][e]*scale_log2 if key < n_k else -np.inf
                            mx0[lane] = max(mx0[lane], s[j][lane][0], s[j][lane][1])
                            mx1[lane] = max(mx1[lane], s[j][lane][2], s[j][lane][3])
                    # quad reductions (xor 1, 2)
                    for arr in (mx0, mx1):
                        for lane0 in range(0, 32, 4):
                            v = max(arr[lane0:lane0+4]); arr[lane0:lane0+4] = [v]*4
                    for lane in range(32):
                        c0 = 2**(m0[lane] - mx0[lane]); c1 = 2**(m1[lane] - mx1[lane])
                        m0[lane] = mx0[lane]; m1[lane] = mx1[lane]
                        rs0 = rs1 = 0.0
                        for j in range(BK//8):
                            s[j][lane][0] = 2**(s[j][lane][0]-m0[lane]); s[j][lane][1] = 2**(s[j][lane][1]-m0[lane])
                            s[j][lane][2] = 2**(s[j][lane][2]-m1[lane]); s[j][lane][3] = 2**(s[j][lane][3]-m1[lane])
                            rs0 += s[j][lane][0] + s[j][lane][1]; rs1 += s[j][lane][2] + s[j][lane][3]
                        l0[lane] = l0[lane]*c0 + rs0; l1[lane] = l1[lane]*c1 + rs1
                        for n in range(HD//8):
                            o[n][lane][0] *= c0; o[n][lane][1] *= c0; o[n][lane][2] *= c1; o[n][lane][3] *= c1
                    for kk in range(BK//16):
                        pa = [[s[2*kk][l][0], s[2*kk][l][1], s[2*kk][l][2], s[2*kk][l][3], s[2*kk+1][l][0], s[2*kk+1][l][1], s[2*kk+1][l][2], s[2*kk+1][l][3]] for l in range(32)]
                        for n in range(HD//8):
                            b = []
                            for lane in range(32):
                                g, t = lane >> 2, lane & 3
                                b.append([vts[n*8+g, kk*16+t*2], vts[n*8+g, kk*16+t*2+1], vts[n*8+g, kk*16+t*2+8], vts[n*8+g, kk*16+t*2+9]])
                            mma(o[n], pa, b)
                for arr in (l0, l1):
                    for lane0 in range(0, 32, 4):
                        v = sum(arr[lane0:lane0+4]); arr[lane0:lane0+4] = [v]*4
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    r0 = r0s[lane]; r1 = r0 + 8
                    for n in range(HD//8):
                        c = head*HD + n*8 + t*2
                        if r0 < n_q: y[r0, c:c+2] = [o[n][lane][0]/l0[lane], o[n][lane][1]/l0[lane]]
                        if r1 < n_q: y[r1, c:c+2] = [o[n][lane][2]/l1[lane], o[n][lane][3]/l1[lane]]
    return y

def ref(q, kv, n_q, n_k, heads, HD):
    C = heads*HD; y = np.zeros((n_q, C))
    for h in range(heads):
        Q = q[:, h*HD:(h+1)*HD]; K = kv[:, h*HD:(h+1)*HD]; V = kv[:, C+h*HD:C+(h+1)*HD]
        S = Q @ K.T / np.sqrt(HD); S -= S.max(1, keepdims=True); P = np.exp(S); P /= P.sum(1, keepdims=True)
        y[:, h*HD:(h+1)*HD] = P @ V
    return y

for (n_q, n_k, heads, HD) in [(70, 130, 2, 32), (20, 64, 1, 64), (33, 5, 1, 32)]:
    q = rng.standard_normal((n_q, heads*HD)); kv = rng.standard_normal((n_k, 2*heads*HD))
    d = np.abs(flash(q, kv, n_q, n_k, heads, HD) - ref(q, kv, n_q, n_k, heads, HD)).max()
    print(n_q, n_k, heads, HD, "max diff", d)

// Split-KV flash attention: the same softmax attention as attention.cu's
// flash kernel (q [n_q, heads*hd], kv [n_k, 2*heads*hd], y [n_q, heads*hd]),
// laid out to fill a large GPU. SegFormer's last stages have few queries
// (1024x1024 input: 4096 x 5 heads and 1024 x 8 heads) against 1024 keys,
// so one block per (64 queries, head) leaves an H100's 132 SMs idle or
// single-blocked; splitting the keys of each (query tile, head) over
// gridDim.z blocks multiplies the blocks, and a small second kernel merges
// the splits' partial softmaxes.
//
// Per block: 4 warps x 16 queries, Q fragments in registers, key tiles of 64
// double-buffered in shared memory with cp.async (the next tile is in flight
// while this one is multiplied), K and V fed to mma.m16n8k16 by ldmatrix (V
// with .trans, so it is copied row-major as it lies in kv), the score matrix
// only ever in registers. Needs sm_80 (cp.async, ldmatrix, bf16 mma).
//
// With one split the block normalises and writes y itself. With several, each
// writes its unnormalised O (f32) and its rows' (max, sum) in base 2 to the
// workspace, as floats:
//   O  [splits][n_q][heads*hd]        at 0
//   ml [splits][n_q][heads][2]        at splits*n_q*heads*hd
// and flash_split_combine writes y. src/backend/cuda/backend.rs sizes it
// (split_workspace_floats).

#define FS_WARPS 4
#define FS_BQ (16 * FS_WARPS)  // queries per block: one 16-row mma tile per warp
#define FS_BK 64               // keys per shared-memory tile
// Row padding (elements): rows of (HD+8)*2 bytes put the 8 rows one ldmatrix
// phase reads on 8 disjoint 16-byte bank groups (HD 64: 144 B = 36 words, row
// r starts at bank 4r; HD 32: 80 B = 20 words, banks 0,20,8,28,16,4,24,12),
// and keep every row 16-byte aligned for cp.async and ldmatrix.
#define FS_PAD 8

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16 bytes global -> shared, bypassing L1 (.cg: K/V tiles are reused from L2
// by the other query tiles, not by this SM). src_bytes 0 reads nothing and
// fills the 16 bytes with zeros: keys past n_k.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give matrix i's row addresses, and
// lane l gets (row l/4, cols 2(l%4), +1) of each matrix (.trans: of its
// transpose) in r[0..3].
__device__ __forceinline__ void ldmatrix_x4(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// Queues the copy of key tile k0 (keys k0..k0+63, this head's K and V rows)
// into one shared buffer. Keys past n_k are zero-filled, their source clamped
// to key n_k-1 so that even the unread address stays inside kv: zeros rather
// than stale data, because a masked key's probability is 0 and 0 * NaN from
// a stale V would still poison O.
template <class S, int HD>
__device__ __forceinline__ void load_tile(S (*ks)[HD + FS_PAD], S (*vs)[HD + FS_PAD], const S* __restrict__ kv, int k0,
                                          int n_k, int C, int head) {
    constexpr int CHUNKS = HD / 8;  // 16-byte chunks per row
    static_assert(FS_BK * CHUNKS % (FS_WARPS * 32) == 0, "every thread copies the same number of chunks");
#pragma unroll
    for (int r = 0; r < FS_BK * CHUNKS / (FS_WARPS * 32); r++) {
        const int i = r * FS_WARPS * 32 + threadIdx.x;
        const int key = i / CHUNKS, c8 = (i % CHUNKS) * 8;
        const int k = k0 + key;
        const int bytes = k < n_k ? 16 : 0;
        const S* row = kv + (long)min(k, n_k - 1) * 2 * C + head * HD + c8;
        cp_async16(&ks[key][c8], row, bytes);
        cp_async16(&vs[key][c8], row + C, bytes);
    }
}

template <class T, int HD>
__device__ void flash_split_impl(const typename T::S* __restrict__ q, const typename T::S* __restrict__ kv,
                                 typename T::S* __restrict__ y, float* __restrict__ ws, int n_q, int n_k, int heads,
                                 int tiles_per_split, float scale_log2) {
    typedef typename T::S S;
    __shared__ __align__(16) S ks[2][FS_BK][HD + FS_PAD];  // keys, key-major
    __shared__ __align__(16) S vs[2][FS_BK][HD + FS_PAD];  // values, key-major (ldmatrix.trans transposes)
    const int C = heads * HD;
    const int head = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = blockIdx.x * FS_BQ + warp * 16 + g, r1 = r0 + 8;
    // Whole tiles per split, so only the very last tile of the keys is partial.
    const int k_begin = split * tiles_per_split * FS_BK;
    const int k_end = min(n_k, k_begin + tiles_per_split * FS_BK);
    const int tiles = k_end > k_begin ? (k_end - k_begin + FS_BK - 1) / FS_BK : 0;

    if (tiles > 0) {
        load_tile<S, HD>(ks[0], vs[0], kv, k_begin, n_k, C, head);
    }
    cp_async_commit();

    u32 qa[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        int c = head * HD + kk * 16 + t * 2;
        qa[kk][0] = r0 < n_q ? *(const u32*)(q + (long)r0 * C + c) : 0u;
        qa[kk][1] = r1 < n_q ? *(const u32*)(q + (long)r1 * C + c) : 0u;
        qa[kk][2] = r0 < n_q ? *(const u32*)(q + (long)r0 * C + c + 8) : 0u;
        qa[kk][3] = r1 < n_q ? *(const u32*)(q + (long)r1 * C + c + 8) : 0u;
    }
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;

    // ldmatrix row addresses: lane l names row l%8 of matrix l/8.
    const int lrow = lane & 7, lmat = lane >> 3;

    for (int it = 0; it < tiles; it++) {
        const int buf = it & 1, k0 = k_begin + it * FS_BK;
        // The other buffer was last read in iteration it-1, which ended in a
        // barrier: refill it with the next tile while this one is computed.
        if (it + 1 < tiles) load_tile<S, HD>(ks[buf ^ 1], vs[buf ^ 1], kv, k0 + FS_BK, n_k, C, head);
        cp_async_commit();   // possibly empty: keeps "all but the newest group" meaning this tile
        cp_async_wait<1>();  // this thread's copies of tile `it` have landed...
        __syncthreads();     // ...and everyone else's

        // S = Q K^T: for key group j, matrices 0..3 of one ldmatrix.x4 are
        // keys j*8..j*8+7 at dims h*32 + 0/8/16/24, i.e. the mma B fragments
        // (b0, b1) for k-steps 2h and 2h+1.
        float s[FS_BK / 8][4];
#pragma unroll
        for (int j = 0; j < FS_BK / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
            for (int h = 0; h < HD / 32; h++) {
                u32 b[4];
                ldmatrix_x4(b, &ks[buf][j * 8 + lrow][h * 32 + lmat * 8]);
                T::mma(s[j], qa[2 * h], b[0], b[1]);
                T::mma(s[j], qa[2 * h + 1], b[2], b[3]);
            }
        }
        // Online softmax in base 2, as attention.cu: elements 0,1 are row r0,
        // 2,3 row r1; a row is spread over the 4 lanes sharing g.
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int j = 0; j < FS_BK / 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + j * 8 + t * 2 + (e & 1);
                s[j][e] = key < k_end ? s[j][e] * scale_log2 : NEG_INF;
            }
            mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
            mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        // A split's first tile always holds a valid key, so mx is finite from here.
        float c0 = exp2f(m0 - mx0), c1 = exp2f(m1 - mx1);
        m0 = mx0;
        m1 = mx1;
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int j = 0; j < FS_BK / 8; j++) {
            s[j][0] = exp2f(s[j][0] - m0);
            s[j][1] = exp2f(s[j][1] - m0);
            s[j][2] = exp2f(s[j][2] - m1);
            s[j][3] = exp2f(s[j][3] - m1);
            rs0 += s[j][0] + s[j][1];
            rs1 += s[j][2] + s[j][3];
        }
        l0 = l0 * c0 + rs0;
        l1 = l1 * c1 + rs1;
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            o[n][0] *= c0;
            o[n][1] *= c0;
            o[n][2] *= c1;
            o[n][3] *= c1;
        }
        // O += P V, 16 keys per step. One ldmatrix.x4.trans covers dims
        // np*16..np*16+15: matrices 0/1 are keys +0..7 / +8..15 at dims
        // np*16 (b0, b1 of n = 2np), matrices 2/3 the same at np*16+8.
#pragma unroll
        for (int kk = 0; kk < FS_BK / 16; kk++) {
            u32 pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                         pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int np = 0; np < HD / 16; np++) {
                u32 b[4];
                ldmatrix_x4_trans(b, &vs[buf][kk * 16 + (lmat & 1) * 8 + lrow][np * 16 + (lmat >> 1) * 8]);
                T::mma(o[2 * np], pa, b[0], b[1]);
                T::mma(o[2 * np + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads();  // this buffer is refilled next iteration
    }
    cp_async_wait<0>();  // no copy may outlive the block (there are none left: hygiene)

    // Each lane summed only its own columns: finish the row sums across the quad.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if (splits == 1) {
        float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            int c = head * HD + n * 8 + t * 2;
            if (r0 < n_q) *(u32*)(y + (long)r0 * C + c) = pack2<T>(o[n][0] * inv0, o[n][1] * inv0);
            if (r1 < n_q) *(u32*)(y + (long)r1 * C + c) = pack2<T>(o[n][2] * inv1, o[n][3] * inv1);
        }
        return;
    }
    // An empty split (the host never makes one) leaves m = -inf, l = 0, O = 0:
    // weight 0 in the combine.
    float* wo = ws + (long)split * n_q * C;
    float* wml = ws + (long)splits * n_q * C + (long)split * n_q * heads * 2;
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        int c = head * HD + n * 8 + t * 2;
        if (r0 < n_q) {
            wo[(long)r0 * C + c] = o[n][0];
            wo[(long)r0 * C + c + 1] = o[n][1];
        }
        if (r1 < n_q) {
            wo[(long)r1 * C + c] = o[n][2];
            wo[(long)r1 * C + c + 1] = o[n][3];
        }
    }
    if (t == 0) {
        if (r0 < n_q) {
            wml[((long)r0 * heads + head) * 2] = m0;
            wml[((long)r0 * heads + head) * 2 + 1] = l0;
        }
        if (r1 < n_q) {
            wml[((long)r1 * heads + head) * 2] = m1;
            wml[((long)r1 * heads + head) * 2 + 1] = l1;
        }
    }
}

// One thread per (query row, pair of channels): rescales each split's partial
// to the rows' overall max (base 2) and normalises by the summed l.
template <class T>
__device__ void flash_split_combine_impl(const float* __restrict__ ws, typename T::S* __restrict__ y, int n_q,
                                         int heads, int hd, int splits) {
    const int C = heads * hd, pairs = C / 2;
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)n_q * pairs) return;
    const long row = idx / pairs;
    const int c = (int)(idx % pairs) * 2, head = c / hd;
    const float* ml = ws + (long)splits * n_q * C + (row * heads + head) * 2;
    const long ml_stride = (long)n_q * heads * 2;
    float m = NEG_INF;
    for (int s = 0; s < splits; s++) m = fmaxf(m, ml[s * ml_stride]);
    float l = 0.0f, o0 = 0.0f, o1 = 0.0f;
    for (int s = 0; s < splits; s++) {
        const float w = exp2f(ml[s * ml_stride] - m);
        const float* o = ws + ((long)s * n_q + row) * C + c;
        l += w * ml[s * ml_stride + 1];
        o0 += w * o[0];
        o1 += w * o[1];
    }
    const float inv = 1.0f / l;
    *(u32*)(y + row * C + c) = pack2<T>(o0 * inv, o1 * inv);
}

#define FLASH_SPLIT(T, sfx)                                                                                   \
    extern "C" __global__ void __launch_bounds__(FS_WARPS * 32)                                             \
        flash_split_hd32_##sfx(const T::S* q, const T::S* kv, T::S* y, float* ws, int n_q, int n_k,         \
                               int heads, int tiles_per_split, float scale_log2) {                          \
        flash_split_impl<T, 32>(q, kv, y, ws, n_q, n_k, heads, tiles_per_split, scale_log2);                \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(FS_WARPS * 32)                                             \
        flash_split_hd64_##sfx(const T::S* q, const T::S* kv, T::S* y, float* ws, int n_q, int n_k,         \
                               int heads, int tiles_per_split, float scale_log2) {                          \
        flash_split_impl<T, 64>(q, kv, y, ws, n_q, n_k, heads, tiles_per_split, scale_log2);                \
    }                                                                                                        \
    extern "C" __global__ void flash_split_combine_##sfx(const float* ws, T::S* y, int n_q, int heads, int hd, \
                                                         int splits) {                                       \
        flash_split_combine_impl<T>(ws, y, n_q, heads, hd, splits);                                          \
    }
FOR_EACH_HALF_TYPE(FLASH_SPLIT)

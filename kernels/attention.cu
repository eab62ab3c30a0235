// Softmax attention of queries [n_q, heads*hd] against keys/values packed as
// kv [n_k, 2*heads*hd] (all keys' channels, then all values'), output
// [n_q, heads*hd]. The score matrix is never stored: the flash kernel keeps a
// running max and sum per query row (online softmax) while it streams key
// tiles through shared memory, so stage 1's 65536 x 1024 scores (B5 at
// 1024x1024) cost registers, not 128 MB of memory traffic.

#define FA_WARPS 4
#define FA_BQ (16 * FA_WARPS)  // queries per block: one 16-row mma tile per warp
#define FA_BK 64               // keys per shared-memory tile

// Tensor-core flash attention for 16-bit types and head_dim HD (32 or 64).
// Fragment layouts are those of mma.m16n8k16 (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"): g = lane/4 picks the row (and row+8), t = lane%4 the column
// pair. S = Q K^T comes out in the accumulator layout, which is exactly the A
// layout P needs for O += P V, so probabilities never leave registers.
template <class T, int HD>
__device__ void flash_attention_impl(const typename T::S* __restrict__ q, const typename T::S* __restrict__ kv,
                                     typename T::S* __restrict__ y, int n_q, int n_k, int heads, float scale_log2) {
    typedef typename T::S S;
    __shared__ __align__(16) S ks[FA_BK][HD + 8];   // keys, key-major (+8: fewer bank conflicts)
    __shared__ __align__(16) S vts[HD][FA_BK + 8];  // values transposed, dim-major
    const int C = heads * HD;
    const int head = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = blockIdx.x * FA_BQ + warp * 16 + g, r1 = r0 + 8;

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

    for (int k0 = 0; k0 < n_k; k0 += FA_BK) {
        __syncthreads();  // the previous tile is no longer read
        for (int i = threadIdx.x; i < FA_BK * HD / 2; i += blockDim.x) {
            int key = i / (HD / 2), c2 = (i % (HD / 2)) * 2;
            u32 kp = 0u, vp = 0u;
            if (k0 + key < n_k) {
                const S* row = kv + (long)(k0 + key) * 2 * C + head * HD + c2;
                kp = *(const u32*)row;
                vp = *(const u32*)(row + C);
            }
            *(u32*)&ks[key][c2] = kp;
            vts[c2][key] = (S)(vp & 0xffffu);
            vts[c2 + 1][key] = (S)(vp >> 16);
        }
        __syncthreads();

        // S = Q K^T for this tile: FA_BK/8 accumulator tiles of 16x8.
        float s[FA_BK / 8][4];
#pragma unroll
        for (int j = 0; j < FA_BK / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                u32 b0 = *(const u32*)&ks[j * 8 + g][kk * 16 + t * 2];
                u32 b1 = *(const u32*)&ks[j * 8 + g][kk * 16 + t * 2 + 8];
                T::mma(s[j], qa[kk], b0, b1);
            }
        }
        // Online softmax in base 2 (scale_log2 = log2(e)/sqrt(hd)); keys past
        // n_k are masked. Elements 0,1 belong to row r0 and 2,3 to row r1;
        // a row is spread over the 4 lanes sharing g.
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int j = 0; j < FA_BK / 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + j * 8 + t * 2 + (e & 1);
                s[j][e] = key < n_k ? s[j][e] * scale_log2 : NEG_INF;
            }
            mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
            mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        // The first tile always holds a valid key, so mx is finite from here.
        float c0 = exp2f(m0 - mx0), c1 = exp2f(m1 - mx1);
        m0 = mx0;
        m1 = mx1;
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int j = 0; j < FA_BK / 8; j++) {
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
        // O += P V, 16 keys per step; P's A fragment is two S tiles side by side.
#pragma unroll
        for (int kk = 0; kk < FA_BK / 16; kk++) {
            u32 pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                         pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                u32 b0 = *(const u32*)&vts[n * 8 + g][kk * 16 + t * 2];
                u32 b1 = *(const u32*)&vts[n * 8 + g][kk * 16 + t * 2 + 8];
                T::mma(o[n], pa, b0, b1);
            }
        }
    }
    // Each lane summed only its own columns: finish the row sums across the quad.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        int c = head * HD + n * 8 + t * 2;
        if (r0 < n_q) *(u32*)(y + (long)r0 * C + c) = pack2<T>(o[n][0] * inv0, o[n][1] * inv0);
        if (r1 < n_q) *(u32*)(y + (long)r1 * C + c) = pack2<T>(o[n][2] * inv1, o[n][3] * inv1);
    }
}

// Any type, any head size up to 256: one thread per (query, head), f32 math.
// The reference the flash kernel is checked against, and the path for f32
// and unusual head sizes.
template <class T>
__device__ void attention_simple_impl(const typename T::S* __restrict__ q, const typename T::S* __restrict__ kv,
                                      typename T::S* __restrict__ y, int n_q, int n_k, int heads, int hd, float scale) {
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)n_q * heads || hd > 256) return;
    int head = (int)(idx % heads);
    long row = idx / heads;
    const int C = heads * hd;
    const typename T::S* qr = q + row * C + head * hd;
    float acc[256];
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    float m = NEG_INF, l = 0.0f;
    for (int k = 0; k < n_k; k++) {
        const typename T::S* kr = kv + (long)k * 2 * C + head * hd;
        float s = 0.0f;
        for (int d = 0; d < hd; d++) s += T::ld(qr[d]) * T::ld(kr[d]);
        s *= scale;
        float mn = fmaxf(m, s);
        float corr = __expf(m - mn), p = __expf(s - mn);
        l = l * corr + p;
        for (int d = 0; d < hd; d++) acc[d] = acc[d] * corr + p * T::ld(kr[C + d]);
        m = mn;
    }
    typename T::S* yr = y + row * C + head * hd;
    for (int d = 0; d < hd; d++) yr[d] = T::st(acc[d] / l);
}

#define FLASH(T, sfx)                                                                                        \
    extern "C" __global__ void __launch_bounds__(FA_WARPS * 32)                                            \
        flash_attention_hd32_##sfx(const T::S* q, const T::S* kv, T::S* y, int n_q, int n_k, int heads,    \
                                   float scale_log2) {                                                      \
        flash_attention_impl<T, 32>(q, kv, y, n_q, n_k, heads, scale_log2);                                 \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(FA_WARPS * 32)                                            \
        flash_attention_hd64_##sfx(const T::S* q, const T::S* kv, T::S* y, int n_q, int n_k, int heads,    \
                                   float scale_log2) {                                                      \
        flash_attention_impl<T, 64>(q, kv, y, n_q, n_k, heads, scale_log2);                                 \
    }
FOR_EACH_HALF_TYPE(FLASH)

#define SIMPLE(T, sfx)                                                                                        \
    extern "C" __global__ void attention_simple_##sfx(const T::S* q, const T::S* kv, T::S* y, int n_q, int n_k, \
                                                      int heads, int hd, float scale) {                        \
        attention_simple_impl<T>(q, kv, y, n_q, n_k, heads, hd, scale);                                        \
    }
FOR_EACH_TYPE(SIMPLE)

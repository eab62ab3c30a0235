// Layer norm over the channels of each token (eps 1e-5 as HF), one warp per
// row; statistics in f32 whatever the storage type.

template <class T>
__device__ void layer_norm_impl(const typename T::S* __restrict__ x, const typename T::S* __restrict__ gamma,
                                const typename T::S* __restrict__ beta, typename T::S* __restrict__ y, int rows, int dim) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const typename T::S* xr = x + (long)row * dim;
    typename T::S* yr = y + (long)row * dim;
    float sum = 0.0f;
    for (int c = lane; c < dim; c += 32) sum += T::ld(xr[c]);
    float mean = warp_sum(sum) / (float)dim;
    // Two passes (the row is in L1 by now): stabler than E[x^2] - mean^2.
    float sq = 0.0f;
    for (int c = lane; c < dim; c += 32) {
        float d = T::ld(xr[c]) - mean;
        sq += d * d;
    }
    float inv = rsqrtf(warp_sum(sq) / (float)dim + 1e-5f);
    for (int c = lane; c < dim; c += 32)
        yr[c] = T::st((T::ld(xr[c]) - mean) * inv * T::ld(gamma[c]) + T::ld(beta[c]));
}

// The same with each row read from memory once, in 16-byte chunks held in
// registers (CHUNKS per lane: rows of up to 32 * CHUNKS * 16 bytes), for
// rows a whole number of chunks long. The scalar form above reads each row
// three times, 2 bytes per lane per load; SegFormer's rows (32-512
// channels) are all whole chunks.
template <class T, int CHUNKS>
__device__ void layer_norm_vec_impl(const typename T::S* __restrict__ x, const typename T::S* __restrict__ gamma,
                                    const typename T::S* __restrict__ beta, typename T::S* __restrict__ y, int rows,
                                    int dim) {
    typedef typename T::S S;
    const int E = 16 / sizeof(S);  // elements per chunk
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int chunks = dim / E;
    const uint4* xr = (const uint4*)(x + (long)row * dim);
    float v[CHUNKS][16 / sizeof(S)];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < CHUNKS; j++) {
        int c = lane + 32 * j;
        uint4 u = c < chunks ? xr[c] : make_uint4(0u, 0u, 0u, 0u);
        const S* e = (const S*)&u;
#pragma unroll
        for (int k = 0; k < E; k++) {
            v[j][k] = T::ld(e[k]);
            sum += v[j][k];  // zeros past the row add nothing
        }
    }
    float mean = warp_sum(sum) / (float)dim;
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < CHUNKS; j++) {
        if (lane + 32 * j >= chunks) continue;
#pragma unroll
        for (int k = 0; k < E; k++) {
            float d = v[j][k] - mean;
            sq += d * d;
        }
    }
    float inv = rsqrtf(warp_sum(sq) / (float)dim + 1e-5f);
    uint4* yr = (uint4*)(y + (long)row * dim);
#pragma unroll
    for (int j = 0; j < CHUNKS; j++) {
        int c = lane + 32 * j;
        if (c >= chunks) continue;
        uint4 gu = ((const uint4*)gamma)[c], bu = ((const uint4*)beta)[c], out;
        const S *g = (const S*)&gu, *b = (const S*)&bu;
        S* o = (S*)&out;
#pragma unroll
        for (int k = 0; k < E; k++) o[k] = T::st((v[j][k] - mean) * inv * T::ld(g[k]) + T::ld(b[k]));
        yr[c] = out;
    }
}

#define LAYER_NORM(T, sfx)                                                                            \
    extern "C" __global__ void layer_norm_##sfx(const T::S* x, const T::S* gamma, const T::S* beta,  \
                                                T::S* y, int rows, int dim) {                         \
        layer_norm_impl<T>(x, gamma, beta, y, rows, dim);                                             \
    }                                                                                                 \
    extern "C" __global__ void layer_norm_vec1_##sfx(const T::S* x, const T::S* gamma,               \
                                                     const T::S* beta, T::S* y, int rows, int dim) {  \
        layer_norm_vec_impl<T, 1>(x, gamma, beta, y, rows, dim);                                      \
    }                                                                                                 \
    extern "C" __global__ void layer_norm_vec2_##sfx(const T::S* x, const T::S* gamma,               \
                                                     const T::S* beta, T::S* y, int rows, int dim) {  \
        layer_norm_vec_impl<T, 2>(x, gamma, beta, y, rows, dim);                                      \
    }                                                                                                 \
    extern "C" __global__ void layer_norm_vec4_##sfx(const T::S* x, const T::S* gamma,               \
                                                     const T::S* beta, T::S* y, int rows, int dim) {  \
        layer_norm_vec_impl<T, 4>(x, gamma, beta, y, rows, dim);                                      \
    }
FOR_EACH_TYPE(LAYER_NORM)

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

#define LAYER_NORM(T, sfx)                                                                            \
    extern "C" __global__ void layer_norm_##sfx(const T::S* x, const T::S* gamma, const T::S* beta,  \
                                                T::S* y, int rows, int dim) {                         \
        layer_norm_impl<T>(x, gamma, beta, y, rows, dim);                                             \
    }
FOR_EACH_TYPE(LAYER_NORM)

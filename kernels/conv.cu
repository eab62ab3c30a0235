// Convolution helpers. Strided convolutions (patch embeddings, the attention's
// sequence reduction) run as im2col + one tensor-core GEMM; the Mix-FFN's
// depthwise 3x3 conv is fused with its bias and exact GELU.

// x [h, w, c_in] -> cols [out_h*out_w, ld], columns (ky, kx, ci) to match
// HWIO weights [k, k, c_in, c_out], then zeros up to ld: rows padded to a
// multiple of 8 elements keep the GEMM operand aligned for tensor cores
// (the stage-1 patch embedding has k*k*c_in = 147). Padding reads as zero.
template <class T>
__device__ void im2col_impl(const typename T::S* __restrict__ x, typename T::S* __restrict__ cols, int h, int w, int c_in,
                            int k, int stride, int pad, int out_h, int out_w, int ld) {
    int kk = k * k * c_in;
    long total = (long)out_h * out_w * ld;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        long p = i / ld;
        int r = (int)(i - p * ld);
        if (r >= kk) {
            cols[i] = T::st(0.0f);
            continue;
        }
        int ci = r % c_in;
        int kx = (r / c_in) % k;
        int ky = r / (c_in * k);
        int ox = (int)(p % out_w), oy = (int)(p / out_w);
        int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
        bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
        cols[i] = inside ? x[((long)iy * w + ix) * c_in + ci] : T::st(0.0f);
    }
}

// y = gelu(dwconv3x3(x) + bias) over [h, w, c]; weights [3, 3, c].
template <class T>
__device__ void dwconv3x3_gelu_impl(const typename T::S* __restrict__ x, const typename T::S* __restrict__ wt,
                                    const typename T::S* __restrict__ bias, typename T::S* __restrict__ y, int h, int w, int c) {
    long total = (long)h * w * c;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int ch = (int)(i % c);
        long p = i / c;
        int px = (int)(p % w), py = (int)(p / w);
        float acc = T::ld(bias[ch]);
#pragma unroll
        for (int ky = 0; ky < 3; ky++) {
            int yy = py + ky - 1;
            if (yy < 0 || yy >= h) continue;
#pragma unroll
            for (int kx = 0; kx < 3; kx++) {
                int xx = px + kx - 1;
                if (xx < 0 || xx >= w) continue;
                acc += T::ld(x[((long)yy * w + xx) * c + ch]) * T::ld(wt[(ky * 3 + kx) * c + ch]);
            }
        }
        y[i] = T::st(gelu_erf(acc));
    }
}

#define CONV(T, sfx)                                                                                            \
    extern "C" __global__ void im2col_##sfx(const T::S* x, T::S* cols, int h, int w, int c_in, int k, int stride, \
                                            int pad, int out_h, int out_w, int ld) {                               \
        im2col_impl<T>(x, cols, h, w, c_in, k, stride, pad, out_h, out_w, ld);                                    \
    }                                                                                                              \
    extern "C" __global__ void dwconv3x3_gelu_##sfx(const T::S* x, const T::S* wt, const T::S* bias, T::S* y,     \
                                                    int h, int w, int c) {                                         \
        dwconv3x3_gelu_impl<T>(x, wt, bias, y, h, w, c);                                                          \
    }
FOR_EACH_TYPE(CONV)

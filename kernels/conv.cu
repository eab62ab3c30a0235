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

// The same, 16 bytes per thread, where c_in is a whole number of 16-byte
// chunks (every patch embedding and spatial reduction but stage 1's RGB
// input): a chunk then lies inside one pixel's channels, or wholly in the
// zero padding up to ld, so each thread makes one aligned load and store.
template <class T>
__device__ void im2col_vec_impl(const typename T::S* __restrict__ x, typename T::S* __restrict__ cols, int h, int w,
                                int c_in, int k, int stride, int pad, int out_h, int out_w, int ld) {
    const int E = 16 / sizeof(typename T::S);
    int kk = k * k * c_in;
    int ld_chunks = ld / E;
    long total = (long)out_h * out_w * ld_chunks;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        long p = i / ld_chunks;
        int r = (int)(i - p * ld_chunks) * E;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (r < kk) {
            int ci = r % c_in;
            int kx = (r / c_in) % k;
            int ky = r / (c_in * k);
            int ox = (int)(p % out_w), oy = (int)(p / out_w);
            int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
            if (iy >= 0 && iy < h && ix >= 0 && ix < w) v = *(const uint4*)(x + ((long)iy * w + ix) * c_in + ci);
        }
        ((uint4*)cols)[i] = v;
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

// The same op at memory speed (the one above spends its time on 64-bit index
// division and 9 scalar loads per output). Thread = (4 channels, 1 column,
// DW_ROWS rows): channels are innermost, so a warp reads 32 x 4 contiguous
// channels per pixel (one vector load each); going down its rows the thread
// slides a 3x3 window and loads only the new row's 3 pixels, so each input
// vector is read 3 times (by the 3 column neighbours, through L1) instead of
// 9. The 9 weight vectors and the bias are loaded once. 32-bit index math.
// Needs c % 4 == 0 and 4-element-aligned x, y, wt, bias (the host checks).
// Grid: x over (c/4) * w threads, y over ceil(h / DW_ROWS) row strips.
#define DW_ROWS 8

// Four consecutive elements as f32: one 8-byte load for 16-bit types, one
// 16-byte load for f32.
template <class T>
__device__ __forceinline__ void ld4(const typename T::S* p, float* v) {
    if (sizeof(typename T::S) == 2) {
        uint2 r = *reinterpret_cast<const uint2*>(p);
        v[0] = T::ld((typename T::S)(r.x & 0xffff));
        v[1] = T::ld((typename T::S)(r.x >> 16));
        v[2] = T::ld((typename T::S)(r.y & 0xffff));
        v[3] = T::ld((typename T::S)(r.y >> 16));
    } else {
        float4 r = *reinterpret_cast<const float4*>(p);
        v[0] = r.x; v[1] = r.y; v[2] = r.z; v[3] = r.w;
    }
}

template <class T>
__device__ __forceinline__ void st4(typename T::S* p, const float* v) {
    if (sizeof(typename T::S) == 2) {
        uint2 r;
        r.x = (u32)(u16)T::st(v[0]) | ((u32)(u16)T::st(v[1]) << 16);
        r.y = (u32)(u16)T::st(v[2]) | ((u32)(u16)T::st(v[3]) << 16);
        *reinterpret_cast<uint2*>(p) = r;
    } else {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
}

template <class T>
__device__ void dwconv3x3_gelu_tiled_impl(const typename T::S* __restrict__ x, const typename T::S* __restrict__ wt,
                                          const typename T::S* __restrict__ bias, typename T::S* __restrict__ y, int h,
                                          int w, int c) {
    int groups = c >> 2;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= groups * w) return;
    int cg = t % groups, px = t / groups, ch = cg << 2;
    int y0 = blockIdx.y * DW_ROWS;
    if (y0 >= h) return;
    float k[9][4], b[4];
#pragma unroll
    for (int j = 0; j < 9; j++) ld4<T>(wt + j * c + ch, k[j]);
    ld4<T>(bias + ch, b);
    // win[r][dx][e]: input row (yy - 1 + r), column px - 1 + dx; zero outside.
    float win[3][3][4];
    auto load_row = [&](int r, int yy) {
#pragma unroll
        for (int dx = 0; dx < 3; dx++) {
            int xx = px + dx - 1;
            if (yy >= 0 && yy < h && xx >= 0 && xx < w) {
                ld4<T>(x + (yy * w + xx) * c + ch, win[r][dx]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) win[r][dx][e] = 0.0f;
            }
        }
    };
    load_row(0, y0 - 1);
    load_row(1, y0);
    int y1 = min(y0 + DW_ROWS, h);
    for (int yy = y0; yy < y1; yy++) {
        load_row(2, yy + 1);
        float acc[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float a = b[e];
#pragma unroll
            for (int r = 0; r < 3; r++)
#pragma unroll
                for (int dx = 0; dx < 3; dx++) a += win[r][dx][e] * k[r * 3 + dx][e];
            acc[e] = gelu_erf(a);
        }
        st4<T>(y + (yy * w + px) * c + ch, acc);
#pragma unroll
        for (int dx = 0; dx < 3; dx++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                win[0][dx][e] = win[1][dx][e];
                win[1][dx][e] = win[2][dx][e];
            }
    }
}

#define CONV(T, sfx)                                                                                            \
    extern "C" __global__ void im2col_##sfx(const T::S* x, T::S* cols, int h, int w, int c_in, int k, int stride, \
                                            int pad, int out_h, int out_w, int ld) {                               \
        im2col_impl<T>(x, cols, h, w, c_in, k, stride, pad, out_h, out_w, ld);                                    \
    }                                                                                                              \
    extern "C" __global__ void im2col_vec_##sfx(const T::S* x, T::S* cols, int h, int w, int c_in, int k,         \
                                                int stride, int pad, int out_h, int out_w, int ld) {               \
        im2col_vec_impl<T>(x, cols, h, w, c_in, k, stride, pad, out_h, out_w, ld);                                \
    }                                                                                                              \
    extern "C" __global__ void dwconv3x3_gelu_##sfx(const T::S* x, const T::S* wt, const T::S* bias, T::S* y,     \
                                                    int h, int w, int c) {                                         \
        dwconv3x3_gelu_impl<T>(x, wt, bias, y, h, w, c);                                                          \
    }                                                                                                              \
    extern "C" __global__ void dwconv3x3_gelu_tiled_##sfx(const T::S* x, const T::S* wt, const T::S* bias,        \
                                                          T::S* y, int h, int w, int c) {                          \
        dwconv3x3_gelu_tiled_impl<T>(x, wt, bias, y, h, w, c);                                                    \
    }
FOR_EACH_TYPE(CONV)

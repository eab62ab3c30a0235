// The frame path's ends on the GPU: uint8 frame -> normalised model input, and
// logits -> per-pixel class, confidence and road statistics at frame size.
// Both replicate the CPU's (backend/cpu/preprocess.rs, backend/cpu/postprocess.rs).

#define FMT_RGB 0
#define FMT_RGBA 1
#define FMT_NV12 2

__device__ __forceinline__ void frame_rgb(const u8* f, int fh, int stride, int fmt, int x, int y, float* rgb) {
    if (fmt == FMT_NV12) {
        float luma = (float)f[(long)y * stride + x];
        long uv = (long)stride * fh + (long)(y / 2) * stride + (x / 2) * 2;
        float u = (float)f[uv] - 128.0f, v = (float)f[uv + 1] - 128.0f;
        float c = 1.1643836f * (luma - 16.0f);
        rgb[0] = rintf(fminf(fmaxf(c + 1.5960268f * v, 0.0f), 255.0f));
        rgb[1] = rintf(fminf(fmaxf(c - 0.3917623f * u - 0.812968f * v, 0.0f), 255.0f));
        rgb[2] = rintf(fminf(fmaxf(c + 2.0172322f * u, 0.0f), 255.0f));
    } else {
        int bpp = fmt == FMT_RGBA ? 4 : 3;
        const u8* p = f + (long)y * stride + (long)x * bpp;
        rgb[0] = (float)p[0];
        rgb[1] = (float)p[1];
        rgb[2] = (float)p[2];
    }
}

// frame [fh, fw] (RGB, RGBA or NV12) -> each value through `tone` (256 floats: the frame's
// tone curve, src/exposure.rs; the identity for most frames) -> out [h, w, 3], bilinear, /255,
// ImageNet mean/std.
template <class T>
__device__ void preprocess_impl(const u8* __restrict__ frame, int fw, int fh, int stride, int fmt,
                                const float* __restrict__ tone, typename T::S* __restrict__ out, int w, int h) {
    const float mean[3] = {0.485f, 0.456f, 0.406f};
    const float inv_std[3] = {1.0f / 0.229f, 1.0f / 0.224f, 1.0f / 0.225f};
    long total = (long)w * h;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int col = (int)(i % w), row = (int)(i / w);
        int x0, x1, y0, y1;
        float lx, ly;
        bilinear_source(col, fw, w, &x0, &x1, &lx);
        bilinear_source(row, fh, h, &y0, &y1, &ly);
        float a[3], b[3], c[3], d[3];
        frame_rgb(frame, fh, stride, fmt, x0, y0, a);
        frame_rgb(frame, fh, stride, fmt, x1, y0, b);
        frame_rgb(frame, fh, stride, fmt, x0, y1, c);
        frame_rgb(frame, fh, stride, fmt, x1, y1, d);
#pragma unroll
        for (int ch = 0; ch < 3; ch++) {
            // frame_rgb gives whole values 0..255, so they index the table as the CPU's ToneCurve::map does.
            a[ch] = tone[(int)a[ch]];
            b[ch] = tone[(int)b[ch]];
            c[ch] = tone[(int)c[ch]];
            d[ch] = tone[(int)d[ch]];
            float v = (1.0f - ly) * ((1.0f - lx) * a[ch] + lx * b[ch]) + ly * ((1.0f - lx) * c[ch] + lx * d[ch]);
            out[i * 3 + ch] = T::st((v / 255.0f - mean[ch]) * inv_std[ch]);
        }
    }
}

// logits [lh, lw, labels] -> classes/confidence [fh, fw]: bilinear upsample,
// softmax max-probability, argmax (first maximum wins, as on the CPU), class
// 255 below `threshold`. Road pixels and the confidence sum are reduced per
// warp, then added atomically into totals (u32 road count, f32 confidence sum).
template <class T>
__device__ void postprocess_impl(const typename T::S* __restrict__ logits, int lw, int lh, int labels, float scale,
                                 int fw, int fh,
                                 const u8* __restrict__ road_is, float threshold, u8* __restrict__ classes,
                                 float* __restrict__ confidence, u32* road_total, float* confidence_total) {
    long total = (long)fw * fh;
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    u32 road = 0;
    float conf = 0.0f;
    if (i < total) {
        int col = (int)(i % fw), row = (int)(i / fw);
        int x0, x1, y0, y1;
        float lx, ly;
        bilinear_source(col, lw, fw, &x0, &x1, &lx);
        bilinear_source(row, lh, fh, &y0, &y1, &ly);
        const typename T::S* p00 = logits + ((long)y0 * lw + x0) * labels;
        const typename T::S* p01 = logits + ((long)y0 * lw + x1) * labels;
        const typename T::S* p10 = logits + ((long)y1 * lw + x0) * labels;
        const typename T::S* p11 = logits + ((long)y1 * lw + x1) * labels;
        // `scale` (1 / passes summed) folded into the bilinear weights.
        float w00 = (1.0f - ly) * (1.0f - lx) * scale, w01 = (1.0f - ly) * lx * scale, w10 = ly * (1.0f - lx) * scale,
              w11 = ly * lx * scale;
        float best = NEG_INF;
        int arg = 0;
        for (int k = 0; k < labels; k++) {
            float v = w00 * T::ld(p00[k]) + w01 * T::ld(p01[k]) + w10 * T::ld(p10[k]) + w11 * T::ld(p11[k]);
            if (v > best) {
                best = v;
                arg = k;
            }
        }
        float sum = 0.0f;
        for (int k = 0; k < labels; k++) {
            float v = w00 * T::ld(p00[k]) + w01 * T::ld(p01[k]) + w10 * T::ld(p10[k]) + w11 * T::ld(p11[k]);
            sum += __expf(v - best);
        }
        float p = 1.0f / sum;
        confidence[i] = p;
        conf = p;
        bool known = p >= threshold;
        classes[i] = known ? (u8)arg : (u8)255;
        road = known && arg < 256 && road_is[arg] ? 1u : 0u;
    }
    for (int o = 16; o > 0; o >>= 1) {
        road += __shfl_xor_sync(0xffffffffu, road, o);
        conf += __shfl_xor_sync(0xffffffffu, conf, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(road_total, road);
        atomicAdd(confidence_total, conf);
    }
}

#define FRAME(T, sfx)                                                                                            \
    extern "C" __global__ void preprocess_##sfx(const u8* frame, int fw, int fh, int stride, int fmt,           \
                                                const float* tone, T::S* out, int w, int h) {                    \
        preprocess_impl<T>(frame, fw, fh, stride, fmt, tone, out, w, h);                                        \
    }                                                                                                            \
    extern "C" __global__ void postprocess_##sfx(const T::S* logits, int lw, int lh, int labels, float scale,     \
                                                 int fw, int fh,                                                 \
                                                 const u8* road_is, float threshold, u8* classes,                \
                                                 float* confidence, u32* road_total, float* confidence_total) {  \
        postprocess_impl<T>(logits, lw, lh, labels, scale, fw, fh, road_is, threshold, classes, confidence,      \
                            road_total, confidence_total);                                                       \
    }
FOR_EACH_TYPE(FRAME)

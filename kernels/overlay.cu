// The overlay on the GPU: tints a frame in place with its segmentation, as
// the CPU's annotator does (images.rs `frame_overlay`, video/annotate.rs), bit
// for bit: the same f32 operations in the same order, with contraction into
// FMAs ruled out (__fmul_rn / __fadd_rn), and round-half-away like Rust.
//
// `ov` is the overlay as floats: 256 class tints (r, g, b, alpha), then the
// unknown checker's and the hood's; alpha 0 leaves a pixel alone. `tops` is
// each column's first hood row (0xffffffff: no hood in that column). Both
// are copied up per frame inside the graph, so they are data, not arguments. Frames are RGB, RGBA
// or NV12 (frame.cu's FMT_*); NV12 chroma of a 2x2 block takes the tint of
// its top-left pixel. One thread per pixel; the thread of a block's top-left
// pixel also does its chroma.

#define OV_UNKNOWN 256
#define OV_HOOD 257
#define OV_PICTURE 258
#define OV_EDGE 259
#define OV_ROAD (260 * 4)

__device__ __forceinline__ bool overlay_road_at(const float* ov, const u8* classes, const float* pic, int fw, int x, int y) {
    if ((float)x < pic[0] || (float)y < pic[1] || (float)x >= pic[2] || (float)y >= pic[3]) return false;
    return ov[OV_ROAD + classes[(long)y * fw + x]] > 0.0f;
}

__device__ __forceinline__ bool overlay_near_road(const float* ov, const u8* classes, const float* pic, int fw, int x, int y) {
    const int reach[2] = {3, 8};
    for (int k = 0; k < 2; ++k) {
        int r = reach[k];
        if ((x >= r && overlay_road_at(ov, classes, pic, fw, x - r, y)) || overlay_road_at(ov, classes, pic, fw, x + r, y) ||
            (y >= r && overlay_road_at(ov, classes, pic, fw, x, y - r)) || overlay_road_at(ov, classes, pic, fw, x, y + r))
            return true;
    }
    return false;
}

__device__ __forceinline__ bool overlay_tint(const float* ov, const u8* classes, const u32* tops, int fw, int x, int y,
                                             float* c, float* a) {
    const float* pic = ov + OV_PICTURE * 4;
    if ((float)x < pic[0] || (float)y < pic[1] || (float)x >= pic[2] || (float)y >= pic[3]) return false;
    int entry;
    if ((u32)y >= tops[x]) {
        entry = OV_HOOD;
    } else {
        u8 cls = classes[(long)y * fw + x];
        if (cls == 255) {
            if (ov[OV_EDGE * 4 + 3] > 0.0f && overlay_near_road(ov, classes, pic, fw, x, y)) {
                entry = OV_EDGE;
            } else {
                if (((x / 4 + y / 4) & 1) != 0) return false;
                entry = OV_UNKNOWN;
            }
        } else {
            entry = cls;
        }
    }
    const float* t = ov + entry * 4;
    if (!(t[3] > 0.0f)) return false;
    c[0] = t[0];
    c[1] = t[1];
    c[2] = t[2];
    *a = t[3];
    return true;
}

__device__ __forceinline__ u8 overlay_blend(u8 under, float over, float a) {
    return (u8)roundf(__fadd_rn(__fmul_rn((float)under, __fadd_rn(1.0f, -a)), __fmul_rn(over, a)));
}

// BT.601 video-range YUV of an RGB colour, summed left to right as on the CPU.
__device__ __forceinline__ void overlay_yuv(const float* c, float* yuv) {
    yuv[0] = __fadd_rn(__fadd_rn(__fadd_rn(16.0f, __fmul_rn(0.256788f, c[0])), __fmul_rn(0.504129f, c[1])),
                       __fmul_rn(0.097906f, c[2]));
    yuv[1] = __fadd_rn(__fadd_rn(__fadd_rn(128.0f, -__fmul_rn(0.148223f, c[0])), -__fmul_rn(0.290993f, c[1])),
                       __fmul_rn(0.439216f, c[2]));
    yuv[2] = __fadd_rn(__fadd_rn(__fadd_rn(128.0f, __fmul_rn(0.439216f, c[0])), -__fmul_rn(0.367788f, c[1])),
                       -__fmul_rn(0.071427f, c[2]));
}

extern "C" __global__ void annotate_frame(u8* __restrict__ frame, int fw, int fh, int stride, int fmt,
                                          const u8* __restrict__ classes, const float* __restrict__ ov,
                                          const u32* __restrict__ tops) {
    long total = (long)fw * fh;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int x = (int)(i % fw), y = (int)(i / fw);
        float c[3], a;
        if (!overlay_tint(ov, classes, tops, fw, x, y, c, &a)) continue;
        if (fmt == 2) {  // FMT_NV12
            float yuv[3];
            overlay_yuv(c, yuv);
            u8* luma = frame + (long)y * stride + x;
            *luma = overlay_blend(*luma, yuv[0], a);
            if ((x & 1) == 0 && (y & 1) == 0) {  // NV12 sides are even
                u8* uv = frame + (long)stride * fh + (long)(y / 2) * stride + x;
                uv[0] = overlay_blend(uv[0], yuv[1], a);
                uv[1] = overlay_blend(uv[1], yuv[2], a);
            }
        } else {
            u8* p = frame + (long)y * stride + (long)x * (fmt == 1 ? 4 : 3);
            p[0] = overlay_blend(p[0], c[0], a);
            p[1] = overlay_blend(p[1], c[1], a);
            p[2] = overlay_blend(p[2], c[2], a);
        }
    }
}

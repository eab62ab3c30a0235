// Shared by every kernel file. The loader prepends this to each .cu source
// (NVRTC gets one translation unit and no include paths), so nothing here may
// rely on CUDA's headers: half and bfloat16 are raw 16-bit storage converted
// with PTX, which keeps the kernels independent of the toolkit install.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

#define NEG_INF (__int_as_float(0xff800000))

// Element types: `S` is the storage type, `ld`/`st` convert to and from the
// f32 every kernel computes in.
struct F32 {
    typedef float S;
    static __device__ __forceinline__ float ld(S v) { return v; }
    static __device__ __forceinline__ S st(float f) { return f; }
};

struct F16 {
    typedef u16 S;
    static __device__ __forceinline__ float ld(S v) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
        return f;
    }
    static __device__ __forceinline__ S st(float f) {
        u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return h;
    }
    // D = A(16x16, row) * B(16x8, col) + D with f32 accumulation (tensor cores).
    static __device__ __forceinline__ void mma(float* d, const u32* a, u32 b0, u32 b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

struct BF16 {
    typedef u16 S;
    static __device__ __forceinline__ float ld(S v) { return __uint_as_float(((u32)v) << 16); }
    static __device__ __forceinline__ S st(float f) {
        u16 h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return h;
    }
    static __device__ __forceinline__ void mma(float* d, const u32* a, u32 b0, u32 b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// Two values as one 32-bit register, first element in the low half (the
// order mma fragments and little-endian memory both use).
template <class T>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    return (u32)T::st(lo) | ((u32)T::st(hi) << 16);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

// Bilinear source index as PyTorch computes it (half-pixel centres,
// align_corners=False, no antialias); identical to the CPU backend.
__device__ __forceinline__ void bilinear_source(int dst, int src_len, int dst_len, int* i0, int* i1, float* frac) {
    float scale = (float)src_len / (float)dst_len;
    float real = fmaxf(((float)dst + 0.5f) * scale - 0.5f, 0.0f);
    int a = min((int)real, src_len - 1);
    *i0 = a;
    *i1 = min(a + 1, src_len - 1);
    *frac = real - (float)a;
}

// Channel `ch` of a `[src_h, src_w, c]` map sampled for destination pixel
// (dx, dy) of a `[dst_h, dst_w]` resize, as the CPU backend's bilinear does.
template <class T>
__device__ __forceinline__ float bilinear_sample(const typename T::S* __restrict__ x, int src_h, int src_w, int dst_h,
                                                 int dst_w, int dx, int dy, int c, int ch) {
    int x0, x1, y0, y1;
    float lx, ly;
    bilinear_source(dx, src_w, dst_w, &x0, &x1, &lx);
    bilinear_source(dy, src_h, dst_h, &y0, &y1, &ly);
    float a = T::ld(x[((long)y0 * src_w + x0) * c + ch]), b = T::ld(x[((long)y0 * src_w + x1) * c + ch]);
    float d = T::ld(x[((long)y1 * src_w + x0) * c + ch]), e = T::ld(x[((long)y1 * src_w + x1) * c + ch]);
    return (1.0f - ly) * ((1.0f - lx) * a + lx * b) + ly * ((1.0f - lx) * d + lx * e);
}

// One kernel entry point per element type, named `<name>_<suffix>`.
#define FOR_EACH_TYPE(M) M(F32, f32) M(F16, f16) M(BF16, bf16)
#define FOR_EACH_HALF_TYPE(M) M(F16, f16) M(BF16, bf16)

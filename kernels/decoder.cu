// The decode head's tail in one pass (issue 9). For each 1/4-resolution
// pixel: stage 1's projection (which already holds every bias and the
// BatchNorm shift) plus the bilinear samples of stages 2-4's projections,
// ReLU, then the classifier. Only the logits are written: the hidden vector
// (768 channels on B5) never goes to memory, where the unfused head wrote and
// re-read the whole 1/4-resolution hidden tensor once per stage, once for the
// ReLU and once for the classifier GEMM. Sums run in f32 (the unfused head
// rounds to the storage type after every stage).
//
// A block takes DEC_PIXELS consecutive pixels. Its first threads work out,
// once per pixel and stage, where that pixel's four bilinear taps lie and
// their weights (the divisions and coordinates that do not depend on the
// channel: done per element they were most of the kernel's instructions,
// Nsight Compute's 1.24 ms of B5's 8.1 ms on an H100). Then its threads build
// the hidden vectors in shared memory (consecutive threads take consecutive
// channels, so every load is coalesced), then each (pixel, label) pair is one
// thread's dot product over the hidden channels (consecutive threads take
// consecutive labels of the classifier row, again coalesced). The values are
// the same as bilinear_sample's, bit for bit.

#define DEC_PIXELS 8
#define DEC_MAX_HIDDEN 1024
#define DEC_STAGES 3

// One stage's four taps for one output pixel: element offsets of the taps'
// channel 0 (the image's offset included) and the weights.
struct DecTaps {
    long off[4];
    float lx, ly;
};

__device__ __forceinline__ DecTaps dec_taps(long image_base, int src_h, int src_w, int dst_h, int dst_w, int dx, int dy,
                                            int c) {
    int x0, x1, y0, y1;
    DecTaps t;
    bilinear_source(dx, src_w, dst_w, &x0, &x1, &t.lx);
    bilinear_source(dy, src_h, dst_h, &y0, &y1, &t.ly);
    t.off[0] = image_base + ((long)y0 * src_w + x0) * c;
    t.off[1] = image_base + ((long)y0 * src_w + x1) * c;
    t.off[2] = image_base + ((long)y1 * src_w + x0) * c;
    t.off[3] = image_base + ((long)y1 * src_w + x1) * c;
    return t;
}

template <class T>
__device__ __forceinline__ float dec_sample(const typename T::S* __restrict__ x, const DecTaps& t, int ch) {
    float a = T::ld(x[t.off[0] + ch]), b = T::ld(x[t.off[1] + ch]);
    float d = T::ld(x[t.off[2] + ch]), e = T::ld(x[t.off[3] + ch]);
    return (1.0f - t.ly) * ((1.0f - t.lx) * a + t.lx * b) + t.ly * ((1.0f - t.lx) * d + t.lx * e);
}

// For `batch` images: acc [batch*h0*w0, d]; s1..s3 [batch*h_i*w_i, d];
// cls_w [d, labels]; cls_b [labels]; logits [batch*h0*w0, labels].
// Needs d <= DEC_MAX_HIDDEN; grid: ceil(batch*h0*w0 / DEC_PIXELS).
template <class T>
__device__ void decode_tail_impl(const typename T::S* __restrict__ acc, const typename T::S* __restrict__ s1, int h1,
                                 int w1, const typename T::S* __restrict__ s2, int h2, int w2,
                                 const typename T::S* __restrict__ s3, int h3, int w3,
                                 const typename T::S* __restrict__ cls_w, const typename T::S* __restrict__ cls_b,
                                 typename T::S* __restrict__ logits, int batch, int h0, int w0, int d, int labels) {
    __shared__ float hidden[DEC_PIXELS * DEC_MAX_HIDDEN];
    __shared__ DecTaps taps[DEC_PIXELS][DEC_STAGES];
    long per_image = (long)h0 * w0;
    long pixels = per_image * batch;
    long first = (long)blockIdx.x * DEC_PIXELS;
    if (first >= pixels) return;
    int count = (int)min((long)DEC_PIXELS, pixels - first);
    for (int i = threadIdx.x; i < count * DEC_STAGES; i += blockDim.x) {
        int j = i / DEC_STAGES, stage = i - j * DEC_STAGES;
        long p = first + j;
        long img = p / per_image, q = p - img * per_image;
        int dx = (int)(q % w0), dy = (int)(q / w0);
        // Each image samples only its own stage maps.
        if (stage == 0) taps[j][0] = dec_taps(img * h1 * w1 * d, h1, w1, h0, w0, dx, dy, d);
        else if (stage == 1) taps[j][1] = dec_taps(img * h2 * w2 * d, h2, w2, h0, w0, dx, dy, d);
        else taps[j][2] = dec_taps(img * h3 * w3 * d, h3, w3, h0, w0, dx, dy, d);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < count * d; i += blockDim.x) {
        int j = i / d, ch = i - j * d;
        float v = T::ld(acc[(first + j) * d + ch]);
        v += dec_sample<T>(s1, taps[j][0], ch);
        v += dec_sample<T>(s2, taps[j][1], ch);
        v += dec_sample<T>(s3, taps[j][2], ch);
        hidden[j * d + ch] = fmaxf(v, 0.0f);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < count * labels; i += blockDim.x) {
        int j = i / labels, l = i - j * labels;
        const float* h = hidden + j * d;
        float v = T::ld(cls_b[l]);
        for (int c = 0; c < d; ++c) v += h[c] * T::ld(cls_w[(long)c * labels + l]);
        logits[(first + j) * labels + l] = T::st(v);
    }
}

#define DECODER(T, sfx)                                                                                             \
    extern "C" __global__ void decode_tail_##sfx(const T::S* acc, const T::S* s1, int h1, int w1, const T::S* s2,     \
                                                 int h2, int w2, const T::S* s3, int h3, int w3, const T::S* cls_w,  \
                                                 const T::S* cls_b, T::S* logits, int batch, int h0, int w0, int d,  \
                                                 int labels) {                                                       \
        decode_tail_impl<T>(acc, s1, h1, w1, s2, h2, w2, s3, h3, w3, cls_w, cls_b, logits, batch, h0, w0, d,         \
                            labels);                                                                                 \
    }
FOR_EACH_TYPE(DECODER)

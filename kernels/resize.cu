// Bilinear resize of a channels-last map (PyTorch's align_corners=False, no
// antialias), optionally accumulating: the folded decoder adds each stage's
// projection, upsampled, into one buffer.

template <class T>
__device__ void resize_bilinear_impl(const typename T::S* __restrict__ x, typename T::S* __restrict__ y, int src_h,
                                     int src_w, int dst_h, int dst_w, int c, int accumulate) {
    long total = (long)dst_h * dst_w * c;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int ch = (int)(i % c);
        long p = i / c;
        int dx = (int)(p % dst_w), dy = (int)(p / dst_w);
        float v = bilinear_sample<T>(x, src_h, src_w, dst_h, dst_w, dx, dy, c, ch);
        if (accumulate) v += T::ld(y[i]);
        y[i] = T::st(v);
    }
}

#define RESIZE(T, sfx)                                                                                     \
    extern "C" __global__ void resize_bilinear_##sfx(const T::S* x, T::S* y, int src_h, int src_w, int dst_h, \
                                                     int dst_w, int c, int accumulate) {                    \
        resize_bilinear_impl<T>(x, y, src_h, src_w, dst_h, dst_w, c, accumulate);                          \
    }
FOR_EACH_TYPE(RESIZE)

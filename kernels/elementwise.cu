// Element-wise kernels: residual add, ReLU, and f32 <-> storage conversion
// (weights are converted once at load; activations cross to the host as f32).

template <class T>
__device__ void add_assign_impl(typename T::S* y, const typename T::S* x, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        y[i] = T::st(T::ld(y[i]) + T::ld(x[i]));
}

template <class T>
__device__ void relu_impl(typename T::S* y, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        y[i] = T::st(fmaxf(T::ld(y[i]), 0.0f));
}

template <class T>
__device__ void from_f32_impl(typename T::S* y, const float* x, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        y[i] = T::st(x[i]);
}

template <class T>
__device__ void to_f32_impl(float* y, const typename T::S* x, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        y[i] = T::ld(x[i]);
}

#define ELEMENTWISE(T, sfx)                                                                              \
    extern "C" __global__ void add_assign_##sfx(T::S* y, const T::S* x, long n) { add_assign_impl<T>(y, x, n); } \
    extern "C" __global__ void relu_##sfx(T::S* y, long n) { relu_impl<T>(y, n); }                          \
    extern "C" __global__ void from_f32_##sfx(T::S* y, const float* x, long n) { from_f32_impl<T>(y, x, n); } \
    extern "C" __global__ void to_f32_##sfx(float* y, const T::S* x, long n) { to_f32_impl<T>(y, x, n); }
FOR_EACH_TYPE(ELEMENTWISE)

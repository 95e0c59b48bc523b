
extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, float* __restrict__ b1, double fp0) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 30; p += (int)gridDim.x * 256) {
    const int v0 = p;
    const float t0 = (float)b0[v0];
    const double t1 = (double)fp0;
    const float t2 = (float)t1;
    const float t3 = (float)lf_mul(t0, t2);
    b1[v0] = (float)t3;
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_1(const float* b0, const float* __restrict__ b1, float* b2, lf_i64 ip0, lf_i64 ip1) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 15; p += (int)gridDim.x * 256) {
    const int v0 = (p / 3);
    const int v1 = p % 3;
    const float t0 = (float)b0[(v0 * 3 + v1)];
    const float t1 = (float)b1[v1];
    const lf_i64 t2 = (lf_i64)ip0;
    const float t3 = (float)t2;
    const float t4 = (float)lf_mul(t1, t3);
    const float t5 = (float)lf_add(t0, t4);
    const lf_i64 t6 = (lf_i64)ip1;
    const float t7 = (float)t6;
    const float t8 = (float)lf_maximum(t5, t7);
    b2[(v0 * 3 + v1)] = (float)t8;
  }
}

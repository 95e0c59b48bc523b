
extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, double* __restrict__ b1, float* __restrict__ b2, lf_i64 ip0, lf_i64 ip1) {
  const int lane = threadIdx.x % 32;
  for (int p = (int)blockIdx.x * 8 + threadIdx.x / 32; p < 1024; p += (int)gridDim.x * 8) {
    const int v0 = p;
    const lf_i64 t2 = (lf_i64)ip0;
    const lf_i64 t3 = (lf_i64)ip1;
    const float t4 = (float)t3;
    const float t5 = (float)t2;
    const float t6 = (float)lf_mul(t5, t4);
    double a10 = (double)0.0;
    for (int q = lane; q < 1024; q += 32) {
      const int r0 = q;
      const float t0 = (float)b0[(v0 * 1024 + r0)];
      const float t1 = (float)lf_mul(t0, t0);
      const float t7 = (float)lf_add(t1, t6);
      const float t8 = (float)lf_log(t7);
      const double t9 = (double)t8;
      a10 = lf_sum::f(a10, (double)t9);
    }
    a10 = lf_group_reduce<lf_sum, 32>(a10, (double*)0);
    const double t10 = (double)a10;
    float a12 = (-__int_as_float(0x7f800000));
    for (int q = lane; q < 1024; q += 32) {
      const int r0 = q;
      const float t11 = (float)b0[(v0 * 1024 + r0)];
      a12 = lf_max::f(a12, (float)t11);
    }
    a12 = lf_group_reduce<lf_max, 32>(a12, (float*)0);
    const float t12 = (float)a12;
    if (lane == 0) {
      b1[v0] = (double)t10;
      b2[v0] = (float)t12;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_1(const double* __restrict__ b0, float* __restrict__ b1, const float* __restrict__ b2, float* __restrict__ b3) {
  const int lane = threadIdx.x % 32;
  for (int p = (int)blockIdx.x * 8 + threadIdx.x / 32; p < 1; p += (int)gridDim.x * 8) {
    double a1 = (double)0.0;
    for (int q = lane; q < 1024; q += 32) {
      const int r0 = q;
      const double t0 = (double)b0[r0];
      a1 = lf_sum::f(a1, (double)t0);
    }
    a1 = lf_group_reduce<lf_sum, 32>(a1, (double*)0);
    const double t1 = (double)a1;
    const float t2 = (float)t1;
    float a4 = (-__int_as_float(0x7f800000));
    for (int q = lane; q < 1024; q += 32) {
      const int r0 = q;
      const float t3 = (float)b2[r0];
      a4 = lf_max::f(a4, (float)t3);
    }
    a4 = lf_group_reduce<lf_max, 32>(a4, (float*)0);
    const float t4 = (float)a4;
    if (lane == 0) {
      b1[0] = (float)t2;
      b3[0] = (float)t4;
    }
  }
}


extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, float* __restrict__ b1, float* __restrict__ b2, lf_i64 ip0) {
  const int lane = threadIdx.x % 8;
  for (int pw = (int)blockIdx.x * 32 + threadIdx.x / 32 * 4; pw < 6; pw += (int)gridDim.x * 32) {
    const int pg = pw + threadIdx.x % 32 / 8;
    const bool live = pg < 6;
    const int p = live ? pg : 5;
    const int v0 = p;
    float a1 = (-__int_as_float(0x7f800000));
    for (int q = lane; q < 33; q += 8) {
      const int r0 = q;
      const float t0 = (float)b0[(v0 * 33 + r0)];
      a1 = lf_max::f(a1, (float)t0);
    }
    a1 = lf_group_reduce<lf_max, 8>(a1, (float*)0);
    const float t1 = (float)a1;
    const lf_i64 t3 = (lf_i64)ip0;
    const float t4 = (float)t3;
    const float t5 = (float)lf_mul(t1, t4);
    double a9 = (double)0.0;
    for (int q = lane; q < 33; q += 8) {
      const int r0 = q;
      const float t2 = (float)b0[(v0 * 33 + r0)];
      const float t6 = (float)lf_sub(t2, t5);
      const float t7 = (float)lf_exp(t6);
      const double t8 = (double)t7;
      a9 = lf_sum::f(a9, (double)t8);
    }
    a9 = lf_group_reduce<lf_sum, 8>(a9, (double*)0);
    const double t9 = (double)a9;
    const float t10 = (float)t9;
    if (lane == 0 && live) {
      b1[v0] = (float)t1;
      b2[v0] = (float)t10;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_1(const float* b0, const float* __restrict__ b1, const float* __restrict__ b2, float* b3, lf_i64 ip0) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 198; p += (int)gridDim.x * 256) {
    const int v0 = (p / 33);
    const int v1 = p % 33;
    const float t0 = (float)b0[(v0 * 33 + v1)];
    const float t1 = (float)b1[v0];
    const lf_i64 t2 = (lf_i64)ip0;
    const float t3 = (float)t2;
    const float t4 = (float)lf_mul(t1, t3);
    const float t5 = (float)lf_sub(t0, t4);
    const float t6 = (float)lf_exp(t5);
    const float t7 = (float)b2[v0];
    const float t8 = (float)lf_div(t6, t7);
    b3[(v0 * 33 + v1)] = (float)t8;
  }
}

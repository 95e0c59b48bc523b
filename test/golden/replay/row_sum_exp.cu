
extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, float* __restrict__ b1, float* __restrict__ b2, lf_i64 ip0) {
  const int lane = threadIdx.x % 8;
  for (int pw = (int)blockIdx.x * 32 + threadIdx.x / 32 * 4; pw < 6; pw += (int)gridDim.x * 32) {
    const int pg = pw + threadIdx.x % 32 / 8;
    const bool live = pg < 6;
    const int p = live ? pg : 5;
    const int v0 = p;
    double a3 = (double)0.0;
    for (int q = lane; q < 33; q += 8) {
      const int r0 = q;
      const float t0 = (float)b0[(v0 * 33 + r0)];
      const float t1 = (float)lf_exp(t0);
      const double t2 = (double)t1;
      a3 = lf_sum::f(a3, (double)t2);
    }
    a3 = lf_group_reduce<lf_sum, 8>(a3, (double*)0);
    const double t3 = (double)a3;
    const float t4 = (float)t3;
    const lf_i64 t5 = (lf_i64)ip0;
    const float t6 = (float)t5;
    const float t7 = (float)lf_mul(t4, t6);
    if (lane == 0 && live) {
      b1[v0] = (float)t4;
      b2[v0] = (float)t7;
    }
  }
}

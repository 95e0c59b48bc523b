
extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, float* __restrict__ b1, float* __restrict__ b2) {
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
    float a5 = (float)0.0;
    for (int q = lane; q < 33; q += 8) {
      const int r0 = q;
      const float t2 = (float)b0[(v0 * 33 + r0)];
      const float t3 = (float)lf_sub(t2, t1);
      const float t4 = (float)lf_exp(t3);
      a5 = lf_sum::f(a5, (float)t4);
    }
    a5 = lf_group_reduce<lf_sum, 8>(a5, (float*)0);
    const float t5 = (float)a5;
    if (lane == 0 && live) {
      b1[v0] = (float)t1;
      b2[v0] = (float)t5;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_1(const float* b0, const float* __restrict__ b1, const float* __restrict__ b2, float* b3) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 198; p += (int)gridDim.x * 256) {
    const int v0 = (p / 33);
    const int v1 = p % 33;
    const float t0 = (float)b0[(v0 * 33 + v1)];
    const float t1 = (float)b1[v0];
    const float t2 = (float)lf_sub(t0, t1);
    const float t3 = (float)lf_exp(t2);
    const float t4 = (float)b2[v0];
    const float t5 = (float)lf_div(t3, t4);
    b3[(v0 * 33 + v1)] = (float)t5;
  }
}

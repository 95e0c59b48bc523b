
extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, const float* __restrict__ b1, const float* __restrict__ b2, float* __restrict__ b3, lf_i64 ip0) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 24; p += (int)gridDim.x * 256) {
    const int v0 = (p / 6);
    const int v1 = p % 6;
    const float t0 = (float)b0[(v1 * 8 + v0 * 2)];
    const float t1 = (float)b1[(v0 * 8 + (v1 + 1))];
    const lf_i64 t2 = (lf_i64)ip0;
    const float t3 = (float)t2;
    const float t4 = (float)lf_mul(t1, t3);
    const float t5 = (float)lf_add(t0, t4);
    const float t6 = (float)lf_exp(t5);
    const float t7 = (float)b2[v1];
    const float t8 = (float)lf_mul(t6, t7);
    b3[(v0 * 6 + v1)] = (float)t8;
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_0_v4(const float* __restrict__ b0, const float* __restrict__ b1, const float* __restrict__ b2, float* __restrict__ b3, lf_i64 ip0) {
  for (int g = (int)blockIdx.x * 256 + threadIdx.x; g < 6; g += (int)gridDim.x * 256) {
    const int p0 = g * 4;
    lf_pack4<float> w3;
    {
      const int p = p0 + 0;
      const int v0 = (p / 6);
      const int v1 = p % 6;
      const float t0 = (float)b0[(v1 * 8 + v0 * 2)];
      const float t1 = (float)b1[(v0 * 8 + (v1 + 1))];
      const lf_i64 t2 = (lf_i64)ip0;
      const float t3 = (float)t2;
      const float t4 = (float)lf_mul(t1, t3);
      const float t5 = (float)lf_add(t0, t4);
      const float t6 = (float)lf_exp(t5);
      const float t7 = (float)b2[v1];
      const float t8 = (float)lf_mul(t6, t7);
      w3.v[0] = (float)t8;
    }
    {
      const int p = p0 + 1;
      const int v0 = (p / 6);
      const int v1 = p % 6;
      const float t0 = (float)b0[(v1 * 8 + v0 * 2)];
      const float t1 = (float)b1[(v0 * 8 + (v1 + 1))];
      const lf_i64 t2 = (lf_i64)ip0;
      const float t3 = (float)t2;
      const float t4 = (float)lf_mul(t1, t3);
      const float t5 = (float)lf_add(t0, t4);
      const float t6 = (float)lf_exp(t5);
      const float t7 = (float)b2[v1];
      const float t8 = (float)lf_mul(t6, t7);
      w3.v[1] = (float)t8;
    }
    {
      const int p = p0 + 2;
      const int v0 = (p / 6);
      const int v1 = p % 6;
      const float t0 = (float)b0[(v1 * 8 + v0 * 2)];
      const float t1 = (float)b1[(v0 * 8 + (v1 + 1))];
      const lf_i64 t2 = (lf_i64)ip0;
      const float t3 = (float)t2;
      const float t4 = (float)lf_mul(t1, t3);
      const float t5 = (float)lf_add(t0, t4);
      const float t6 = (float)lf_exp(t5);
      const float t7 = (float)b2[v1];
      const float t8 = (float)lf_mul(t6, t7);
      w3.v[2] = (float)t8;
    }
    {
      const int p = p0 + 3;
      const int v0 = (p / 6);
      const int v1 = p % 6;
      const float t0 = (float)b0[(v1 * 8 + v0 * 2)];
      const float t1 = (float)b1[(v0 * 8 + (v1 + 1))];
      const lf_i64 t2 = (lf_i64)ip0;
      const float t3 = (float)t2;
      const float t4 = (float)lf_mul(t1, t3);
      const float t5 = (float)lf_add(t0, t4);
      const float t6 = (float)lf_exp(t5);
      const float t7 = (float)b2[v1];
      const float t8 = (float)lf_mul(t6, t7);
      w3.v[3] = (float)t8;
    }
    *(lf_pack4<float>*)(b3 + p0) = w3;
  }
}

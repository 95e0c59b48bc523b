
extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, const float* b1, float* b2, lf_i64 ip0, lf_i64 ip1, lf_i64 ip2) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 24; p += (int)gridDim.x * 256) {
    const int v0 = (p / 6);
    const int v1 = p % 6;
    const float t0 = (float)b0[(((v0 * 6 + v1) / 4) * 4 + (v0 * 6 + v1) % 4)];
    const lf_i64 t1 = (lf_i64)ip0;
    const float t2 = (float)t1;
    const float t3 = (float)lf_mul(t0, t2);
    const float t4 = (float)lf_sin(t3);
    const lf_i64 t5 = (lf_i64)ip1;
    const float t6 = (float)t5;
    const float t7 = (float)lf_mul(t4, t6);
    const float t8 = (float)lf_add(t0, t7);
    const float t9 = (float)b1[(v0 * 6 + v1)];
    const lf_i64 t10 = (lf_i64)ip2;
    const float t11 = (float)t10;
    const float t12 = (float)lf_mul(t9, t11);
    const float t13 = (float)lf_add(t8, t12);
    b2[(v0 * 6 + v1)] = (float)t13;
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_0_v4(const float* __restrict__ b0, const float* b1, float* b2, lf_i64 ip0, lf_i64 ip1, lf_i64 ip2) {
  for (int g = (int)blockIdx.x * 256 + threadIdx.x; g < 6; g += (int)gridDim.x * 256) {
    const int p0 = g * 4;
    const lf_pack4<float> w1 = *(const lf_pack4<float>*)(b1 + p0);
    lf_pack4<float> w2;
    {
      const int p = p0 + 0;
      const int v0 = (p / 6);
      const int v1 = p % 6;
      const float t0 = (float)b0[(((v0 * 6 + v1) / 4) * 4 + (v0 * 6 + v1) % 4)];
      const lf_i64 t1 = (lf_i64)ip0;
      const float t2 = (float)t1;
      const float t3 = (float)lf_mul(t0, t2);
      const float t4 = (float)lf_sin(t3);
      const lf_i64 t5 = (lf_i64)ip1;
      const float t6 = (float)t5;
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t0, t7);
      const float t9 = (float)w1.v[0];
      const lf_i64 t10 = (lf_i64)ip2;
      const float t11 = (float)t10;
      const float t12 = (float)lf_mul(t9, t11);
      const float t13 = (float)lf_add(t8, t12);
      w2.v[0] = (float)t13;
    }
    {
      const int p = p0 + 1;
      const int v0 = (p / 6);
      const int v1 = p % 6;
      const float t0 = (float)b0[(((v0 * 6 + v1) / 4) * 4 + (v0 * 6 + v1) % 4)];
      const lf_i64 t1 = (lf_i64)ip0;
      const float t2 = (float)t1;
      const float t3 = (float)lf_mul(t0, t2);
      const float t4 = (float)lf_sin(t3);
      const lf_i64 t5 = (lf_i64)ip1;
      const float t6 = (float)t5;
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t0, t7);
      const float t9 = (float)w1.v[1];
      const lf_i64 t10 = (lf_i64)ip2;
      const float t11 = (float)t10;
      const float t12 = (float)lf_mul(t9, t11);
      const float t13 = (float)lf_add(t8, t12);
      w2.v[1] = (float)t13;
    }
    {
      const int p = p0 + 2;
      const int v0 = (p / 6);
      const int v1 = p % 6;
      const float t0 = (float)b0[(((v0 * 6 + v1) / 4) * 4 + (v0 * 6 + v1) % 4)];
      const lf_i64 t1 = (lf_i64)ip0;
      const float t2 = (float)t1;
      const float t3 = (float)lf_mul(t0, t2);
      const float t4 = (float)lf_sin(t3);
      const lf_i64 t5 = (lf_i64)ip1;
      const float t6 = (float)t5;
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t0, t7);
      const float t9 = (float)w1.v[2];
      const lf_i64 t10 = (lf_i64)ip2;
      const float t11 = (float)t10;
      const float t12 = (float)lf_mul(t9, t11);
      const float t13 = (float)lf_add(t8, t12);
      w2.v[2] = (float)t13;
    }
    {
      const int p = p0 + 3;
      const int v0 = (p / 6);
      const int v1 = p % 6;
      const float t0 = (float)b0[(((v0 * 6 + v1) / 4) * 4 + (v0 * 6 + v1) % 4)];
      const lf_i64 t1 = (lf_i64)ip0;
      const float t2 = (float)t1;
      const float t3 = (float)lf_mul(t0, t2);
      const float t4 = (float)lf_sin(t3);
      const lf_i64 t5 = (lf_i64)ip1;
      const float t6 = (float)t5;
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t0, t7);
      const float t9 = (float)w1.v[3];
      const lf_i64 t10 = (lf_i64)ip2;
      const float t11 = (float)t10;
      const float t12 = (float)lf_mul(t9, t11);
      const float t13 = (float)lf_add(t8, t12);
      w2.v[3] = (float)t13;
    }
    *(lf_pack4<float>*)(b2 + p0) = w2;
  }
}


extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, const float* __restrict__ b1, const float* __restrict__ b2, float* __restrict__ b3, lf_i64 ip0, lf_i64 ip1, double fp2) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 96; p += (int)gridDim.x * 256) {
    const int v0 = (p / 24);
    const int v1 = (p / 8) % 3;
    const int v2 = p % 8;
    const float t0 = (float)b0[(v0 * 8 + v2)];
    const float t1 = (float)b1[v1];
    const float t2 = (float)lf_mul(t0, t1);
    const float t3 = (float)lf_sigmoid(t2);
    const float t4 = (float)b2[v2];
    const lf_i64 t5 = (lf_i64)ip0;
    const float t6 = (float)t5;
    const float t7 = (float)lf_mul(t4, t6);
    const float t8 = (float)lf_add(t3, t7);
    const lf_i64 t9 = (lf_i64)ip1;
    const float t10 = (float)t9;
    const float t11 = (float)lf_mul(t1, t10);
    const float t12 = (float)lf_sub(t8, t11);
    const float t13 = (float)lf_tanh(t12);
    const double t14 = (double)fp2;
    const float t15 = (float)t14;
    const float t16 = (float)lf_mul(t13, t15);
    b3[((v0 * 24 + v1 * 8) + v2)] = (float)t16;
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_0_v4(const float* __restrict__ b0, const float* __restrict__ b1, const float* __restrict__ b2, float* __restrict__ b3, lf_i64 ip0, lf_i64 ip1, double fp2) {
  for (int g = (int)blockIdx.x * 256 + threadIdx.x; g < 24; g += (int)gridDim.x * 256) {
    const int p0 = g * 4;
    lf_pack4<float> w3;
    {
      const int p = p0 + 0;
      const int v0 = (p / 24);
      const int v1 = (p / 8) % 3;
      const int v2 = p % 8;
      const float t0 = (float)b0[(v0 * 8 + v2)];
      const float t1 = (float)b1[v1];
      const float t2 = (float)lf_mul(t0, t1);
      const float t3 = (float)lf_sigmoid(t2);
      const float t4 = (float)b2[v2];
      const lf_i64 t5 = (lf_i64)ip0;
      const float t6 = (float)t5;
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t3, t7);
      const lf_i64 t9 = (lf_i64)ip1;
      const float t10 = (float)t9;
      const float t11 = (float)lf_mul(t1, t10);
      const float t12 = (float)lf_sub(t8, t11);
      const float t13 = (float)lf_tanh(t12);
      const double t14 = (double)fp2;
      const float t15 = (float)t14;
      const float t16 = (float)lf_mul(t13, t15);
      w3.v[0] = (float)t16;
    }
    {
      const int p = p0 + 1;
      const int v0 = (p / 24);
      const int v1 = (p / 8) % 3;
      const int v2 = p % 8;
      const float t0 = (float)b0[(v0 * 8 + v2)];
      const float t1 = (float)b1[v1];
      const float t2 = (float)lf_mul(t0, t1);
      const float t3 = (float)lf_sigmoid(t2);
      const float t4 = (float)b2[v2];
      const lf_i64 t5 = (lf_i64)ip0;
      const float t6 = (float)t5;
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t3, t7);
      const lf_i64 t9 = (lf_i64)ip1;
      const float t10 = (float)t9;
      const float t11 = (float)lf_mul(t1, t10);
      const float t12 = (float)lf_sub(t8, t11);
      const float t13 = (float)lf_tanh(t12);
      const double t14 = (double)fp2;
      const float t15 = (float)t14;
      const float t16 = (float)lf_mul(t13, t15);
      w3.v[1] = (float)t16;
    }
    {
      const int p = p0 + 2;
      const int v0 = (p / 24);
      const int v1 = (p / 8) % 3;
      const int v2 = p % 8;
      const float t0 = (float)b0[(v0 * 8 + v2)];
      const float t1 = (float)b1[v1];
      const float t2 = (float)lf_mul(t0, t1);
      const float t3 = (float)lf_sigmoid(t2);
      const float t4 = (float)b2[v2];
      const lf_i64 t5 = (lf_i64)ip0;
      const float t6 = (float)t5;
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t3, t7);
      const lf_i64 t9 = (lf_i64)ip1;
      const float t10 = (float)t9;
      const float t11 = (float)lf_mul(t1, t10);
      const float t12 = (float)lf_sub(t8, t11);
      const float t13 = (float)lf_tanh(t12);
      const double t14 = (double)fp2;
      const float t15 = (float)t14;
      const float t16 = (float)lf_mul(t13, t15);
      w3.v[2] = (float)t16;
    }
    {
      const int p = p0 + 3;
      const int v0 = (p / 24);
      const int v1 = (p / 8) % 3;
      const int v2 = p % 8;
      const float t0 = (float)b0[(v0 * 8 + v2)];
      const float t1 = (float)b1[v1];
      const float t2 = (float)lf_mul(t0, t1);
      const float t3 = (float)lf_sigmoid(t2);
      const float t4 = (float)b2[v2];
      const lf_i64 t5 = (lf_i64)ip0;
      const float t6 = (float)t5;
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t3, t7);
      const lf_i64 t9 = (lf_i64)ip1;
      const float t10 = (float)t9;
      const float t11 = (float)lf_mul(t1, t10);
      const float t12 = (float)lf_sub(t8, t11);
      const float t13 = (float)lf_tanh(t12);
      const double t14 = (double)fp2;
      const float t15 = (float)t14;
      const float t16 = (float)lf_mul(t13, t15);
      w3.v[3] = (float)t16;
    }
    *(lf_pack4<float>*)(b3 + p0) = w3;
  }
}

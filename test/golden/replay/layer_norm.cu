
extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, double* __restrict__ b1, double* __restrict__ b2, float* __restrict__ b3, float* __restrict__ b4) {
  const int lane = threadIdx.x % 8;
  for (int pw = (int)blockIdx.x * 32 + threadIdx.x / 32 * 4; pw < 12; pw += (int)gridDim.x * 32) {
    const int pg = pw + threadIdx.x % 32 / 8;
    const bool live = pg < 12;
    const int p = live ? pg : 11;
    const int v0 = (p / 3);
    const int v1 = p % 3;
    double a2 = (double)0.0;
    for (int q = lane; q < 40; q += 8) {
      const int r0 = q;
      const float t0 = (float)b0[((v0 * 120 + v1 * 40) + r0)];
      const double t1 = (double)t0;
      a2 = lf_sum::f(a2, (double)t1);
    }
    a2 = lf_group_reduce<lf_sum, 8>(a2, (double*)0);
    const double t2 = (double)a2;
    const double t3 = (double)40.0;
    const double t4 = (double)lf_div(t2, t3);
    const float t6 = (float)t4;
    double a10 = (double)0.0;
    for (int q = lane; q < 40; q += 8) {
      const int r0 = q;
      const float t5 = (float)b0[((v0 * 120 + v1 * 40) + r0)];
      const float t7 = (float)lf_sub(t5, t6);
      const float t8 = (float)lf_mul(t7, t7);
      const double t9 = (double)t8;
      a10 = lf_sum::f(a10, (double)t9);
    }
    a10 = lf_group_reduce<lf_sum, 8>(a10, (double*)0);
    const double t10 = (double)a10;
    const double t11 = (double)lf_div(t10, t3);
    const double t12 = (double)1e-05;
    const double t13 = (double)lf_add(t11, t12);
    const double t14 = (double)lf_rsqrt(t13);
    const float t15 = (float)t14;
    if (lane == 0 && live) {
      b1[(v0 * 3 + v1)] = (double)t4;
      b2[(v0 * 3 + v1)] = (double)t11;
      b3[(v0 * 3 + v1)] = (float)t6;
      b4[(v0 * 3 + v1)] = (float)t15;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_1(const float* b0, const double* __restrict__ b1, const double* __restrict__ b2, const float* __restrict__ b3, const float* __restrict__ b4, float* b5) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 480; p += (int)gridDim.x * 256) {
    const int v0 = (p / 120);
    const int v1 = (p / 40) % 3;
    const int v2 = p % 40;
    const float t0 = (float)b0[((v0 * 120 + v1 * 40) + v2)];
    const double t1 = (double)b1[(v0 * 3 + v1)];
    const float t2 = (float)t1;
    const float t3 = (float)lf_sub(t0, t2);
    const double t4 = (double)b2[(v0 * 3 + v1)];
    const double t5 = (double)1e-05;
    const double t6 = (double)lf_add(t4, t5);
    const double t7 = (double)lf_rsqrt(t6);
    const float t8 = (float)t7;
    const float t9 = (float)lf_mul(t3, t8);
    const float t10 = (float)b3[v2];
    const float t11 = (float)lf_mul(t9, t10);
    const float t12 = (float)b4[v2];
    const float t13 = (float)lf_add(t11, t12);
    b5[((v0 * 120 + v1 * 40) + v2)] = (float)t13;
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_1_v4(const float* b0, const double* __restrict__ b1, const double* __restrict__ b2, const float* __restrict__ b3, const float* __restrict__ b4, float* b5) {
  for (int g = (int)blockIdx.x * 256 + threadIdx.x; g < 120; g += (int)gridDim.x * 256) {
    const int p0 = g * 4;
    const lf_pack4<float> w0 = *(const lf_pack4<float>*)(b0 + p0);
    lf_pack4<float> w5;
    {
      const int p = p0 + 0;
      const int v0 = (p / 120);
      const int v1 = (p / 40) % 3;
      const int v2 = p % 40;
      const float t0 = (float)w0.v[0];
      const double t1 = (double)b1[(v0 * 3 + v1)];
      const float t2 = (float)t1;
      const float t3 = (float)lf_sub(t0, t2);
      const double t4 = (double)b2[(v0 * 3 + v1)];
      const double t5 = (double)1e-05;
      const double t6 = (double)lf_add(t4, t5);
      const double t7 = (double)lf_rsqrt(t6);
      const float t8 = (float)t7;
      const float t9 = (float)lf_mul(t3, t8);
      const float t10 = (float)b3[v2];
      const float t11 = (float)lf_mul(t9, t10);
      const float t12 = (float)b4[v2];
      const float t13 = (float)lf_add(t11, t12);
      w5.v[0] = (float)t13;
    }
    {
      const int p = p0 + 1;
      const int v0 = (p / 120);
      const int v1 = (p / 40) % 3;
      const int v2 = p % 40;
      const float t0 = (float)w0.v[1];
      const double t1 = (double)b1[(v0 * 3 + v1)];
      const float t2 = (float)t1;
      const float t3 = (float)lf_sub(t0, t2);
      const double t4 = (double)b2[(v0 * 3 + v1)];
      const double t5 = (double)1e-05;
      const double t6 = (double)lf_add(t4, t5);
      const double t7 = (double)lf_rsqrt(t6);
      const float t8 = (float)t7;
      const float t9 = (float)lf_mul(t3, t8);
      const float t10 = (float)b3[v2];
      const float t11 = (float)lf_mul(t9, t10);
      const float t12 = (float)b4[v2];
      const float t13 = (float)lf_add(t11, t12);
      w5.v[1] = (float)t13;
    }
    {
      const int p = p0 + 2;
      const int v0 = (p / 120);
      const int v1 = (p / 40) % 3;
      const int v2 = p % 40;
      const float t0 = (float)w0.v[2];
      const double t1 = (double)b1[(v0 * 3 + v1)];
      const float t2 = (float)t1;
      const float t3 = (float)lf_sub(t0, t2);
      const double t4 = (double)b2[(v0 * 3 + v1)];
      const double t5 = (double)1e-05;
      const double t6 = (double)lf_add(t4, t5);
      const double t7 = (double)lf_rsqrt(t6);
      const float t8 = (float)t7;
      const float t9 = (float)lf_mul(t3, t8);
      const float t10 = (float)b3[v2];
      const float t11 = (float)lf_mul(t9, t10);
      const float t12 = (float)b4[v2];
      const float t13 = (float)lf_add(t11, t12);
      w5.v[2] = (float)t13;
    }
    {
      const int p = p0 + 3;
      const int v0 = (p / 120);
      const int v1 = (p / 40) % 3;
      const int v2 = p % 40;
      const float t0 = (float)w0.v[3];
      const double t1 = (double)b1[(v0 * 3 + v1)];
      const float t2 = (float)t1;
      const float t3 = (float)lf_sub(t0, t2);
      const double t4 = (double)b2[(v0 * 3 + v1)];
      const double t5 = (double)1e-05;
      const double t6 = (double)lf_add(t4, t5);
      const double t7 = (double)lf_rsqrt(t6);
      const float t8 = (float)t7;
      const float t9 = (float)lf_mul(t3, t8);
      const float t10 = (float)b3[v2];
      const float t11 = (float)lf_mul(t9, t10);
      const float t12 = (float)b4[v2];
      const float t13 = (float)lf_add(t11, t12);
      w5.v[3] = (float)t13;
    }
    *(lf_pack4<float>*)(b5 + p0) = w5;
  }
}

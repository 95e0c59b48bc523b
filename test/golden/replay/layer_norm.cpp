
extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  double* b1 = (double*)buffers[1];
  double* b2 = (double*)buffers[2];
  float* b3 = (float*)buffers[3];
  float* b4 = (float*)buffers[4];
  for (lf_i64 p = begin; p < end; ++p) {
    const lf_i64 v0 = (p / 3);
    const lf_i64 v1 = p % 3;
    double a2 = (double)0.0;
#pragma omp simd reduction(+:a2)
    for (lf_i64 q = 0; q < 40; ++q) {
      const lf_i64 r0 = q;
      const float t0 = (float)b0[((v0 * 120 + v1 * 40) + r0)];
      const double t1 = (double)t0;
      a2 = a2 + (double)t1;
    }
    const double t2 = (double)a2;
    const double t3 = (double)40.0;
    const double t4 = (double)lf_div(t2, t3);
    const float t6 = (float)t4;
    double a10 = (double)0.0;
#pragma omp simd reduction(+:a10)
    for (lf_i64 q = 0; q < 40; ++q) {
      const lf_i64 r0 = q;
      const float t5 = (float)b0[((v0 * 120 + v1 * 40) + r0)];
      const float t7 = (float)lf_sub(t5, t6);
      const float t8 = (float)lf_mul(t7, t7);
      const double t9 = (double)t8;
      a10 = a10 + (double)t9;
    }
    const double t10 = (double)a10;
    const double t11 = (double)lf_div(t10, t3);
    const double t12 = (double)1e-05;
    const double t13 = (double)lf_add(t11, t12);
    const double t14 = (double)lf_rsqrt(t13);
    const float t15 = (float)t14;
    b1[(v0 * 3 + v1)] = (double)t4;
    b2[(v0 * 3 + v1)] = (double)t11;
    b3[(v0 * 3 + v1)] = (float)t6;
    b4[(v0 * 3 + v1)] = (float)t15;
  }
}

extern "C" void lf_kernel_1(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  const double* b1 = (const double*)buffers[1];
  const double* b2 = (const double*)buffers[2];
  const float* b3 = (const float*)buffers[3];
  const float* b4 = (const float*)buffers[4];
  float* b5 = (float*)buffers[5];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 40;
    const lf_i64 hi = lf_imin(40, lo + (end - p));
    const lf_i64 v0 = (p / 120);
    const lf_i64 v1 = (p / 40) % 3;
    const double t1 = (double)b1[(v0 * 3 + v1)];
    const double t2 = (double)b2[(v0 * 3 + v1)];
    const double t3 = (double)1e-05;
    const double t4 = (double)lf_add(t2, t3);
    const double t5 = (double)lf_rsqrt(t4);
    const float t8 = (float)t5;
    const float t9 = (float)t1;
#pragma omp simd
    for (lf_i64 v2 = lo; v2 < hi; ++v2) {
      const float t0 = (float)b0[((v0 * 120 + v1 * 40) + v2)];
      const float t6 = (float)b3[v2];
      const float t7 = (float)b4[v2];
      const float t10 = (float)lf_sub(t0, t9);
      const float t11 = (float)lf_mul(t10, t8);
      const float t12 = (float)lf_mul(t11, t6);
      const float t13 = (float)lf_add(t12, t7);
      b5[((v0 * 120 + v1 * 40) + v2)] = (float)t13;
    }
    p += hi - lo;
  }
}


extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  double* b1 = (double*)buffers[1];
  float* b2 = (float*)buffers[2];
  const lf_i64 t2 = (lf_i64)iparams[0];
  const lf_i64 t3 = (lf_i64)iparams[1];
  const float t4 = (float)t3;
  const float t5 = (float)t2;
  const float t6 = (float)lf_mul(t5, t4);
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 1024;
    const lf_i64 n = lf_imin(256, lf_imin(1024 - lo, end - p));
    double t10[256];
    float t12[256];
    double a10[256];
    for (lf_i64 s = 0; s < n; ++s) a10[s] = (double)0.0;
    float a12[256];
    for (lf_i64 s = 0; s < n; ++s) a12[s] = (float)(-__builtin_inf());
    for (lf_i64 r0 = 0; r0 < 1024; ++r0) {
#pragma omp simd
      for (lf_i64 s = 0; s < n; ++s) {
        const lf_i64 v0 = lo + s;
        const float t0 = (float)b0[(v0 * 1024 + r0)];
        const float t1 = (float)lf_mul(t0, t0);
        const float t7 = (float)lf_add(t1, t6);
        const float t8 = (float)lf_log(t7);
        const double t9 = (double)t8;
        a10[s] = a10[s] + (double)t9;
        const float t11 = (float)b0[(v0 * 1024 + r0)];
        a12[s] = ((float)t11 != (float)t11 || (float)t11 > a12[s]) ? (float)t11 : a12[s];
      }
    }
#pragma omp simd
    for (lf_i64 s = 0; s < n; ++s) {
      const lf_i64 v0 = lo + s;
      t10[s] = (double)a10[s];
      t12[s] = (float)a12[s];
      b1[v0] = (double)t10[s];
      b2[v0] = (float)t12[s];
    }
    p += n;
  }
}

extern "C" void lf_kernel_1(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const double* b0 = (const double*)buffers[0];
  float* b1 = (float*)buffers[1];
  const float* b2 = (const float*)buffers[2];
  float* b3 = (float*)buffers[3];
  for (lf_i64 p = begin; p < end; ++p) {
    double a1 = (double)0.0;
#pragma omp simd reduction(+:a1)
    for (lf_i64 q = 0; q < 1024; ++q) {
      const lf_i64 r0 = q;
      const double t0 = (double)b0[r0];
      a1 = a1 + (double)t0;
    }
    const double t1 = (double)a1;
    const float t2 = (float)t1;
    float a4 = (float)(-__builtin_inf());
    int n4 = 0;
#pragma omp simd reduction(max:a4) reduction(|:n4)
    for (lf_i64 q = 0; q < 1024; ++q) {
      const lf_i64 r0 = q;
      const float t3 = (float)b2[r0];
      a4 = (float)t3 > a4 ? (float)t3 : a4;
      n4 |= (int)((float)t3 != (float)t3);
    }
    a4 = n4 ? (float)__builtin_nan("") : a4;
    const float t4 = (float)a4;
    b1[0] = (float)t2;
    b3[0] = (float)t4;
  }
}

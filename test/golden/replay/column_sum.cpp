
extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  double* b1 = (double*)buffers[1];
  const lf_i64 t1 = (lf_i64)iparams[0];
  const float t2 = (float)t1;
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 48;
    const lf_i64 n = lf_imin(256, lf_imin(48 - lo, end - p));
    const lf_i64 v0 = (p / 48);
    double t5[256];
    double a5[256];
    for (lf_i64 s = 0; s < n; ++s) a5[s] = (double)0.0;
    for (lf_i64 r0 = 0; r0 < 64; ++r0) {
#pragma omp simd
      for (lf_i64 s = 0; s < n; ++s) {
        const lf_i64 v1 = lo + s;
        const float t0 = (float)b0[((v0 * 64 + r0) * 48 + v1)];
        const float t3 = (float)lf_mul(t0, t2);
        const double t4 = (double)t3;
        a5[s] = a5[s] + (double)t4;
      }
    }
#pragma omp simd
    for (lf_i64 s = 0; s < n; ++s) {
      const lf_i64 v1 = lo + s;
      t5[s] = (double)a5[s];
      b1[(v0 * 48 + v1)] = (double)t5[s];
    }
    p += n;
  }
}

extern "C" void lf_kernel_1(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const double* b0 = (const double*)buffers[0];
  float* b1 = (float*)buffers[1];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 48;
    const lf_i64 n = lf_imin(256, lf_imin(48 - lo, end - p));
    double t1[256];
    float t2[256];
    double a1[256];
    for (lf_i64 s = 0; s < n; ++s) a1[s] = (double)0.0;
    for (lf_i64 r0 = 0; r0 < 64; ++r0) {
#pragma omp simd
      for (lf_i64 s = 0; s < n; ++s) {
        const lf_i64 v0 = lo + s;
        const double t0 = (double)b0[(r0 * 48 + v0)];
        a1[s] = a1[s] + (double)t0;
      }
    }
#pragma omp simd
    for (lf_i64 s = 0; s < n; ++s) {
      const lf_i64 v0 = lo + s;
      t1[s] = (double)a1[s];
      t2[s] = (float)t1[s];
      b1[v0] = (float)t2[s];
    }
    p += n;
  }
}

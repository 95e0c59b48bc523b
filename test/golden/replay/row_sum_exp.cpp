
extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  float* b2 = (float*)buffers[2];
  const lf_i64 t5 = (lf_i64)iparams[0];
  const float t6 = (float)t5;
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 6;
    const lf_i64 n = lf_imin(256, lf_imin(6 - lo, end - p));
    double t3[256];
    float t4[256];
    float t7[256];
    double a3[256];
    for (lf_i64 s = 0; s < n; ++s) a3[s] = (double)0.0;
    for (lf_i64 r0 = 0; r0 < 33; ++r0) {
#pragma omp simd
      for (lf_i64 s = 0; s < n; ++s) {
        const lf_i64 v0 = lo + s;
        const float t0 = (float)b0[(v0 * 33 + r0)];
        const float t1 = (float)lf_exp(t0);
        const double t2 = (double)t1;
        a3[s] = a3[s] + (double)t2;
      }
    }
#pragma omp simd
    for (lf_i64 s = 0; s < n; ++s) {
      const lf_i64 v0 = lo + s;
      t3[s] = (double)a3[s];
      t4[s] = (float)t3[s];
      t7[s] = (float)lf_mul(t4[s], t6);
      b1[v0] = (float)t4[s];
      b2[v0] = (float)t7[s];
    }
    p += n;
  }
}

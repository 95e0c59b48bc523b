
extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  const float* b1 = (const float*)buffers[1];
  float* b2 = (float*)buffers[2];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 6;
    const lf_i64 hi = lf_imin(6, lo + (end - p));
    const lf_i64 v0 = (p / 6);
    const lf_i64 t1 = (lf_i64)iparams[0];
    const float t2 = (float)t1;
    const lf_i64 t5 = (lf_i64)iparams[1];
    const float t6 = (float)t5;
    const lf_i64 t10 = (lf_i64)iparams[2];
    const float t11 = (float)t10;
#pragma omp simd
    for (lf_i64 v1 = lo; v1 < hi; ++v1) {
      const float t0 = (float)b0[(((v0 * 6 + v1) / 4) * 4 + (v0 * 6 + v1) % 4)];
      const float t3 = (float)lf_mul(t0, t2);
      const float t4 = (float)lf_sin(t3);
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t0, t7);
      const float t9 = (float)b1[(v0 * 6 + v1)];
      const float t12 = (float)lf_mul(t9, t11);
      const float t13 = (float)lf_add(t8, t12);
      b2[(v0 * 6 + v1)] = (float)t13;
    }
    p += hi - lo;
  }
}

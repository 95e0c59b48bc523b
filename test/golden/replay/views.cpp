
extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  const float* b1 = (const float*)buffers[1];
  const float* b2 = (const float*)buffers[2];
  float* b3 = (float*)buffers[3];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 6;
    const lf_i64 hi = lf_imin(6, lo + (end - p));
    const lf_i64 v0 = (p / 6);
    const lf_i64 t2 = (lf_i64)iparams[0];
    const float t3 = (float)t2;
#pragma omp simd
    for (lf_i64 v1 = lo; v1 < hi; ++v1) {
      const float t0 = (float)b0[(v1 * 8 + v0 * 2)];
      const float t1 = (float)b1[(v0 * 8 + (v1 + 1))];
      const float t4 = (float)lf_mul(t1, t3);
      const float t5 = (float)lf_add(t0, t4);
      const float t6 = (float)lf_exp(t5);
      const float t7 = (float)b2[v1];
      const float t8 = (float)lf_mul(t6, t7);
      b3[(v0 * 6 + v1)] = (float)t8;
    }
    p += hi - lo;
  }
}

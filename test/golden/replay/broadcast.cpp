
extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  const float* b1 = (const float*)buffers[1];
  const float* b2 = (const float*)buffers[2];
  float* b3 = (float*)buffers[3];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 8;
    const lf_i64 hi = lf_imin(8, lo + (end - p));
    const lf_i64 v0 = (p / 24);
    const lf_i64 v1 = (p / 8) % 3;
    const float t1 = (float)b1[v1];
    const lf_i64 t5 = (lf_i64)iparams[0];
    const float t6 = (float)t5;
    const lf_i64 t9 = (lf_i64)iparams[1];
    const float t10 = (float)t9;
    const float t11 = (float)lf_mul(t1, t10);
    const double t14 = (double)fparams[2];
    const float t15 = (float)t14;
#pragma omp simd
    for (lf_i64 v2 = lo; v2 < hi; ++v2) {
      const float t0 = (float)b0[(v0 * 8 + v2)];
      const float t2 = (float)lf_mul(t0, t1);
      const float t3 = (float)lf_sigmoid(t2);
      const float t4 = (float)b2[v2];
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t3, t7);
      const float t12 = (float)lf_sub(t8, t11);
      const float t13 = (float)lf_tanh(t12);
      const float t16 = (float)lf_mul(t13, t15);
      b3[((v0 * 24 + v1 * 8) + v2)] = (float)t16;
    }
    p += hi - lo;
  }
}

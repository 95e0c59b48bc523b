
extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p;
    const lf_i64 hi = end;
    const double t1 = (double)fparams[0];
    const float t2 = (float)t1;
#pragma omp simd
    for (lf_i64 v0 = lo; v0 < hi; ++v0) {
      const float t0 = (float)b0[v0];
      const float t3 = (float)lf_mul(t0, t2);
      b1[v0] = (float)t3;
    }
    p += hi - lo;
  }
}

extern "C" void lf_kernel_1(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  const float* b1 = (const float*)buffers[1];
  float* b2 = (float*)buffers[2];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 3;
    const lf_i64 hi = lf_imin(3, lo + (end - p));
    const lf_i64 v0 = (p / 3);
    const lf_i64 t2 = (lf_i64)iparams[0];
    const float t3 = (float)t2;
    const lf_i64 t6 = (lf_i64)iparams[1];
    const float t7 = (float)t6;
#pragma omp simd
    for (lf_i64 v1 = lo; v1 < hi; ++v1) {
      const float t0 = (float)b0[(v0 * 3 + v1)];
      const float t1 = (float)b1[v1];
      const float t4 = (float)lf_mul(t1, t3);
      const float t5 = (float)lf_add(t0, t4);
      const float t8 = (float)lf_maximum(t5, t7);
      b2[(v0 * 3 + v1)] = (float)t8;
    }
    p += hi - lo;
  }
}


extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  float* b2 = (float*)buffers[2];
  for (lf_i64 p = begin; p < end; ++p) {
    const lf_i64 v0 = p;
    float a1 = (float)(-__builtin_inf());
    int n1 = 0;
#pragma omp simd reduction(max:a1) reduction(|:n1)
    for (lf_i64 q = 0; q < 33; ++q) {
      const lf_i64 r0 = q;
      const float t0 = (float)b0[(v0 * 33 + r0)];
      a1 = (float)t0 > a1 ? (float)t0 : a1;
      n1 |= (int)((float)t0 != (float)t0);
    }
    a1 = n1 ? (float)__builtin_nan("") : a1;
    const float t1 = (float)a1;
    float a5 = (float)0.0;
#pragma omp simd reduction(+:a5)
    for (lf_i64 q = 0; q < 33; ++q) {
      const lf_i64 r0 = q;
      const float t2 = (float)b0[(v0 * 33 + r0)];
      const float t3 = (float)lf_sub(t2, t1);
      const float t4 = (float)lf_exp(t3);
      a5 = a5 + (float)t4;
    }
    const float t5 = (float)a5;
    b1[v0] = (float)t1;
    b2[v0] = (float)t5;
  }
}

extern "C" void lf_kernel_1(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  const float* b1 = (const float*)buffers[1];
  const float* b2 = (const float*)buffers[2];
  float* b3 = (float*)buffers[3];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 33;
    const lf_i64 hi = lf_imin(33, lo + (end - p));
    const lf_i64 v0 = (p / 33);
    const float t1 = (float)b1[v0];
    const float t3 = (float)b2[v0];
#pragma omp simd
    for (lf_i64 v1 = lo; v1 < hi; ++v1) {
      const float t0 = (float)b0[(v0 * 33 + v1)];
      const float t2 = (float)lf_sub(t0, t1);
      const float t4 = (float)lf_exp(t2);
      const float t5 = (float)lf_div(t4, t3);
      b3[(v0 * 33 + v1)] = (float)t5;
    }
    p += hi - lo;
  }
}


extern "C" void lf_kernel_0_rows(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  float* b2 = (float*)buffers[2];
  const float* b3 = (const float*)buffers[3];
  const float* b4 = (const float*)buffers[4];
  const float* b5 = (const float*)buffers[5];
  float* b6 = (float*)buffers[6];
  float c4[33];
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
      c4[q] = t4;
      a5 = a5 + (float)t4;
    }
    const float t5 = (float)a5;
    b1[v0] = (float)t1;
    b2[v0] = (float)t5;
    {
      const lf_i64 v0 = p;
      const float t1 = (float)b4[v0];
      const float t3 = (float)b5[v0];
#pragma omp simd
      for (lf_i64 v1 = 0; v1 < 33; ++v1) {
        const float t0 = (float)b3[(v0 * 33 + v1)];
        const float t2 = (float)lf_sub(t0, t1);
        const float t4 = c4[v1];
        const float t5 = (float)lf_div(t4, t3);
        b6[(v0 * 33 + v1)] = (float)t5;
      }
    }
  }
}

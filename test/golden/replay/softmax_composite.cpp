
extern "C" void lf_kernel_0_rows(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  float* b2 = (float*)buffers[2];
  const float* b3 = (const float*)buffers[3];
  const float* b4 = (const float*)buffers[4];
  const float* b5 = (const float*)buffers[5];
  float* b6 = (float*)buffers[6];
  float c6[33];
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
    const lf_i64 t3 = (lf_i64)iparams[0];
    const float t4 = (float)t3;
    const float t5 = (float)lf_mul(t1, t4);
    double a9 = (double)0.0;
#pragma omp simd reduction(+:a9)
    for (lf_i64 q = 0; q < 33; ++q) {
      const lf_i64 r0 = q;
      const float t2 = (float)b0[(v0 * 33 + r0)];
      const float t6 = (float)lf_sub(t2, t5);
      const float t7 = (float)lf_exp(t6);
      const double t8 = (double)t7;
      c6[q] = t7;
      a9 = a9 + (double)t8;
    }
    const double t9 = (double)a9;
    const float t10 = (float)t9;
    b1[v0] = (float)t1;
    b2[v0] = (float)t10;
    {
      const lf_i64 v0 = p;
      const float t1 = (float)b4[v0];
      const lf_i64 t2 = (lf_i64)iparams[1];
      const float t3 = (float)t2;
      const float t4 = (float)lf_mul(t1, t3);
      const float t7 = (float)b5[v0];
#pragma omp simd
      for (lf_i64 v1 = 0; v1 < 33; ++v1) {
        const float t0 = (float)b3[(v0 * 33 + v1)];
        const float t5 = (float)lf_sub(t0, t4);
        const float t6 = c6[v1];
        const float t8 = (float)lf_div(t6, t7);
        b6[(v0 * 33 + v1)] = (float)t8;
      }
    }
  }
}


extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p;
    const lf_i64 hi = end;
    const lf_i64 t2 = (lf_i64)iparams[0];
    const float t3 = (float)t2;
    const lf_i64 t5 = (lf_i64)iparams[1];
    const lf_i64 t6 = (lf_i64)iparams[2];
    const float t7 = (float)t6;
    const float t8 = (float)t5;
    const float t9 = (float)lf_mul(t8, t7);
    const lf_i64 t12 = (lf_i64)iparams[3];
    const float t13 = (float)t12;
    const double t16 = (double)fparams[4];
    const lf_i64 t17 = (lf_i64)iparams[5];
    const float t18 = (float)t17;
    const float t19 = (float)t16;
    const float t20 = (float)lf_mul(t19, t18);
#pragma omp simd
    for (lf_i64 v0 = lo; v0 < hi; ++v0) {
      const float t0 = (float)b0[v0];
      const float t1 = (float)lf_sin(t0);
      const float t4 = (float)lf_mul(t1, t3);
      const float t10 = (float)lf_add(t4, t9);
      const float t11 = (float)lf_tanh(t10);
      const float t14 = (float)lf_pow_uniform(t11, t13);
      const float t15 = (float)lf_sqrt(t14);
      const float t21 = (float)lf_sub(t15, t20);
      const float t22 = (float)lf_sigmoid(t21);
      const float t23 = (float)lf_neg(t22);
      const float t24 = (float)lf_exp(t23);
      b1[v0] = (float)t24;
    }
    p += hi - lo;
  }
}

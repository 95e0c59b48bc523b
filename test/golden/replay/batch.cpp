
extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p;
    const lf_i64 hi = end;
    const double t1 = (double)fparams[0];
    const float t2 = (float)t1;
    const double t4 = (double)fparams[1];
    const lf_i64 t5 = (lf_i64)iparams[2];
    const float t6 = (float)t5;
    const float t7 = (float)t4;
    const float t8 = (float)lf_mul(t7, t6);
#pragma omp simd
    for (lf_i64 v0 = lo; v0 < hi; ++v0) {
      const float t0 = (float)b0[v0];
      const float t3 = (float)lf_mul(t0, t2);
      const float t9 = (float)lf_add(t3, t8);
      const float t10 = (float)lf_tanh(t9);
      b1[v0] = (float)t10;
    }
    p += hi - lo;
  }
}

extern "C" void lf_kernel_1(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p;
    const lf_i64 hi = end;
    const double t1 = (double)fparams[0];
    const float t2 = (float)t1;
    const double t4 = (double)fparams[1];
    const lf_i64 t5 = (lf_i64)iparams[2];
    const float t6 = (float)t5;
    const float t7 = (float)t4;
    const float t8 = (float)lf_mul(t7, t6);
#pragma omp simd
    for (lf_i64 v0 = lo; v0 < hi; ++v0) {
      const float t0 = (float)b0[v0];
      const float t3 = (float)lf_mul(t0, t2);
      const float t9 = (float)lf_add(t3, t8);
      const float t10 = (float)lf_tanh(t9);
      b1[v0] = (float)t10;
    }
    p += hi - lo;
  }
}

extern "C" void lf_kernel_2(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p;
    const lf_i64 hi = end;
    const double t1 = (double)fparams[0];
    const float t2 = (float)t1;
    const double t4 = (double)fparams[1];
    const lf_i64 t5 = (lf_i64)iparams[2];
    const float t6 = (float)t5;
    const float t7 = (float)t4;
    const float t8 = (float)lf_mul(t7, t6);
#pragma omp simd
    for (lf_i64 v0 = lo; v0 < hi; ++v0) {
      const float t0 = (float)b0[v0];
      const float t3 = (float)lf_mul(t0, t2);
      const float t9 = (float)lf_add(t3, t8);
      const float t10 = (float)lf_tanh(t9);
      b1[v0] = (float)t10;
    }
    p += hi - lo;
  }
}

extern "C" void lf_kernel_3(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  float* b1 = (float*)buffers[1];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p;
    const lf_i64 hi = end;
    const double t1 = (double)fparams[0];
    const float t2 = (float)t1;
    const double t4 = (double)fparams[1];
    const lf_i64 t5 = (lf_i64)iparams[2];
    const float t6 = (float)t5;
    const float t7 = (float)t4;
    const float t8 = (float)lf_mul(t7, t6);
#pragma omp simd
    for (lf_i64 v0 = lo; v0 < hi; ++v0) {
      const float t0 = (float)b0[v0];
      const float t3 = (float)lf_mul(t0, t2);
      const float t9 = (float)lf_add(t3, t8);
      const float t10 = (float)lf_tanh(t9);
      b1[v0] = (float)t10;
    }
    p += hi - lo;
  }
}


extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* b0, float* b1, lf_i64 ip0, lf_i64 ip1, lf_i64 ip2, lf_i64 ip3, double fp4, lf_i64 ip5) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 35; p += (int)gridDim.x * 256) {
    const int v0 = p;
    const float t0 = (float)b0[v0];
    const float t1 = (float)lf_sin(t0);
    const lf_i64 t2 = (lf_i64)ip0;
    const float t3 = (float)t2;
    const float t4 = (float)lf_mul(t1, t3);
    const lf_i64 t5 = (lf_i64)ip1;
    const float t6 = (float)t5;
    const lf_i64 t7 = (lf_i64)ip2;
    const float t8 = (float)t7;
    const float t9 = (float)lf_mul(t6, t8);
    const float t10 = (float)lf_add(t4, t9);
    const float t11 = (float)lf_tanh(t10);
    const lf_i64 t12 = (lf_i64)ip3;
    const float t13 = (float)t12;
    const float t14 = (float)lf_pow_uniform(t11, t13);
    const float t15 = (float)lf_sqrt(t14);
    const double t16 = (double)fp4;
    const float t17 = (float)t16;
    const lf_i64 t18 = (lf_i64)ip5;
    const float t19 = (float)t18;
    const float t20 = (float)lf_mul(t17, t19);
    const float t21 = (float)lf_sub(t15, t20);
    const float t22 = (float)lf_sigmoid(t21);
    const float t23 = (float)lf_neg(t22);
    const float t24 = (float)lf_exp(t23);
    b1[v0] = (float)t24;
  }
}

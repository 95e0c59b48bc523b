
struct lf_tab_lf_batch0 {
  lf_i64 segments, blocks;
  lf_i64 n[4];
  lf_i64 first[4];
  const float* b0[4];
  float* b1[4];
  double fp0[4];
  double fp1[4];
  lf_i64 ip2[4];
};
extern "C" __global__ void __launch_bounds__(256) lf_batch0(const __grid_constant__ lf_tab_lf_batch0 tab) {
  const lf_i64 c = blockIdx.x;
  if (c >= tab.blocks) return;
  int lo = 0, hi = (int)tab.segments - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tab.first[mid] <= c) lo = mid; else hi = mid - 1;
  }
  const int n = (int)tab.n[lo];
  const int begin = (int)(c - tab.first[lo]) * 4096;
  const int end = n - begin < 4096 ? n : begin + 4096;
  const float* b0 = tab.b0[lo];
  float* b1 = tab.b1[lo];
  const double fp0 = tab.fp0[lo];
  const double fp1 = tab.fp1[lo];
  const lf_i64 ip2 = tab.ip2[lo];
  for (int p = begin + (int)threadIdx.x; p < end; p += 256) {
    const int v0 = p;
    const float t0 = (float)b0[v0];
    const double t1 = (double)fp0;
    const float t2 = (float)t1;
    const float t3 = (float)lf_mul(t0, t2);
    const double t4 = (double)fp1;
    const float t5 = (float)t4;
    const lf_i64 t6 = (lf_i64)ip2;
    const float t7 = (float)t6;
    const float t8 = (float)lf_mul(t5, t7);
    const float t9 = (float)lf_add(t3, t8);
    const float t10 = (float)lf_tanh(t9);
    b1[v0] = (float)t10;
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_batch0_v4(const __grid_constant__ lf_tab_lf_batch0 tab) {
  const lf_i64 c = blockIdx.x;
  if (c >= tab.blocks) return;
  int lo = 0, hi = (int)tab.segments - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tab.first[mid] <= c) lo = mid; else hi = mid - 1;
  }
  const int n = (int)tab.n[lo];
  const int begin = (int)(c - tab.first[lo]) * 4096;
  const int end = n - begin < 4096 ? n : begin + 4096;
  const float* b0 = tab.b0[lo];
  float* b1 = tab.b1[lo];
  const double fp0 = tab.fp0[lo];
  const double fp1 = tab.fp1[lo];
  const lf_i64 ip2 = tab.ip2[lo];
  const int vend = begin + (end - begin) / 4 * 4;
  for (int g = begin / 4 + (int)threadIdx.x; g < vend / 4; g += 256) {
    const int p0 = g * 4;
    const lf_pack4<float> w0 = *(const lf_pack4<float>*)(b0 + p0);
    lf_pack4<float> w1;
    {
      const int p = p0 + 0;
      const int v0 = p;
      const float t0 = (float)w0.v[0];
      const double t1 = (double)fp0;
      const float t2 = (float)t1;
      const float t3 = (float)lf_mul(t0, t2);
      const double t4 = (double)fp1;
      const float t5 = (float)t4;
      const lf_i64 t6 = (lf_i64)ip2;
      const float t7 = (float)t6;
      const float t8 = (float)lf_mul(t5, t7);
      const float t9 = (float)lf_add(t3, t8);
      const float t10 = (float)lf_tanh(t9);
      w1.v[0] = (float)t10;
    }
    {
      const int p = p0 + 1;
      const int v0 = p;
      const float t0 = (float)w0.v[1];
      const double t1 = (double)fp0;
      const float t2 = (float)t1;
      const float t3 = (float)lf_mul(t0, t2);
      const double t4 = (double)fp1;
      const float t5 = (float)t4;
      const lf_i64 t6 = (lf_i64)ip2;
      const float t7 = (float)t6;
      const float t8 = (float)lf_mul(t5, t7);
      const float t9 = (float)lf_add(t3, t8);
      const float t10 = (float)lf_tanh(t9);
      w1.v[1] = (float)t10;
    }
    {
      const int p = p0 + 2;
      const int v0 = p;
      const float t0 = (float)w0.v[2];
      const double t1 = (double)fp0;
      const float t2 = (float)t1;
      const float t3 = (float)lf_mul(t0, t2);
      const double t4 = (double)fp1;
      const float t5 = (float)t4;
      const lf_i64 t6 = (lf_i64)ip2;
      const float t7 = (float)t6;
      const float t8 = (float)lf_mul(t5, t7);
      const float t9 = (float)lf_add(t3, t8);
      const float t10 = (float)lf_tanh(t9);
      w1.v[2] = (float)t10;
    }
    {
      const int p = p0 + 3;
      const int v0 = p;
      const float t0 = (float)w0.v[3];
      const double t1 = (double)fp0;
      const float t2 = (float)t1;
      const float t3 = (float)lf_mul(t0, t2);
      const double t4 = (double)fp1;
      const float t5 = (float)t4;
      const lf_i64 t6 = (lf_i64)ip2;
      const float t7 = (float)t6;
      const float t8 = (float)lf_mul(t5, t7);
      const float t9 = (float)lf_add(t3, t8);
      const float t10 = (float)lf_tanh(t9);
      w1.v[3] = (float)t10;
    }
    *(lf_pack4<float>*)(b1 + p0) = w1;
  }
  for (int p = vend + (int)threadIdx.x; p < end; p += 256) {
    const int v0 = p;
    const float t0 = (float)b0[v0];
    const double t1 = (double)fp0;
    const float t2 = (float)t1;
    const float t3 = (float)lf_mul(t0, t2);
    const double t4 = (double)fp1;
    const float t5 = (float)t4;
    const lf_i64 t6 = (lf_i64)ip2;
    const float t7 = (float)t6;
    const float t8 = (float)lf_mul(t5, t7);
    const float t9 = (float)lf_add(t3, t8);
    const float t10 = (float)lf_tanh(t9);
    b1[v0] = (float)t10;
  }
}

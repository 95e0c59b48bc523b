
extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(const float* __restrict__ b0, double* __restrict__ b1, lf_i64 ip0, unsigned char* __restrict__ lf_ws, unsigned int* __restrict__ lf_done) {
  __shared__ bool lf_last;
  const int lf_pb = (int)(blockIdx.x / 2);
  const int lf_s = (int)(blockIdx.x % 2);
  const int pg = lf_pb * 256 + (int)threadIdx.x;
  const bool live = pg < 3072;
  const int p = live ? pg : 3071;
  {
    const int v0 = (p / 48);
    const int v1 = p % 48;
    const lf_i64 t1 = (lf_i64)ip0;
    const float t2 = (float)t1;
    const int q5lo = (int)(64LL * lf_s / 2), q5hi = (int)(64LL * (lf_s + 1) / 2);
    double a5 = (double)0.0;
    for (int q = q5lo + 0; q < q5hi; q += 1) {
      const int r0 = q;
      const float t0 = (float)b0[((v0 * 64 + r0) * 48 + v1)];
      const float t3 = (float)lf_mul(t0, t2);
      const double t4 = (double)t3;
      a5 = lf_sum::f(a5, (double)t4);
    }
    if (live) {
      *(double*)(lf_ws + (((lf_i64)p * 2 + lf_s) * 1 + 0) * 16) = a5;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) lf_last = atomicAdd(&lf_done[lf_pb], 1u) == 2 - 1;
    __syncthreads();
    if (!lf_last) return;
    __threadfence();
    if (live) {
      a5 = (double)0.0;
      for (int j = 0; j < 2; ++j) {
        a5 = lf_sum::f(a5, (double)*(volatile const double*)(lf_ws + (((lf_i64)p * 2 + j) * 1 + 0) * 16));
      }
      const double t5 = (double)a5;
      b1[(v0 * 48 + v1)] = (double)t5;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) lf_kernel_1(const double* __restrict__ b0, float* __restrict__ b1) {
  const int lane = threadIdx.x % 8;
  for (int pw = (int)blockIdx.x * 32 + threadIdx.x / 32 * 4; pw < 48; pw += (int)gridDim.x * 32) {
    const int pg = pw + threadIdx.x % 32 / 8;
    const bool live = pg < 48;
    const int p = live ? pg : 47;
    const int v0 = p;
    double a1 = (double)0.0;
    for (int q = lane; q < 64; q += 8) {
      const int r0 = q;
      const double t0 = (double)b0[(r0 * 48 + v0)];
      a1 = lf_sum::f(a1, (double)t0);
    }
    a1 = lf_group_reduce<lf_sum, 8>(a1, (double*)0);
    const double t1 = (double)a1;
    const float t2 = (float)t1;
    if (lane == 0 && live) {
      b1[v0] = (float)t2;
    }
  }
}

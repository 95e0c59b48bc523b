
extern "C" __global__ void __launch_bounds__(256) scale_bf16(const unsigned short* __restrict__ b0, unsigned short* __restrict__ b1) {
  for (int p = (int)blockIdx.x * 256 + threadIdx.x; p < 4096; p += (int)gridDim.x * 256) {
    const int v0 = p;
    const float t0 = (float)lf_bf16_load(b0[v0]);
    const float t1 = (float)2.0;
    const float t2 = (float)lf_mul(t0, t1);
    b1[v0] = lf_bf16_store((float)t2);
  }
}

extern "C" __global__ void __launch_bounds__(256) scale_bf16_v4(const unsigned short* __restrict__ b0, unsigned short* __restrict__ b1) {
  for (int g = (int)blockIdx.x * 256 + threadIdx.x; g < 1024; g += (int)gridDim.x * 256) {
    const int p0 = g * 4;
    const lf_pack4<unsigned short> w0 = *(const lf_pack4<unsigned short>*)(b0 + p0);
    lf_pack4<unsigned short> w1;
    {
      const int p = p0 + 0;
      const int v0 = p;
      const float t0 = (float)lf_bf16_load(w0.v[0]);
      const float t1 = (float)2.0;
      const float t2 = (float)lf_mul(t0, t1);
      w1.v[0] = lf_bf16_store((float)t2);
    }
    {
      const int p = p0 + 1;
      const int v0 = p;
      const float t0 = (float)lf_bf16_load(w0.v[1]);
      const float t1 = (float)2.0;
      const float t2 = (float)lf_mul(t0, t1);
      w1.v[1] = lf_bf16_store((float)t2);
    }
    {
      const int p = p0 + 2;
      const int v0 = p;
      const float t0 = (float)lf_bf16_load(w0.v[2]);
      const float t1 = (float)2.0;
      const float t2 = (float)lf_mul(t0, t1);
      w1.v[2] = lf_bf16_store((float)t2);
    }
    {
      const int p = p0 + 3;
      const int v0 = p;
      const float t0 = (float)lf_bf16_load(w0.v[3]);
      const float t1 = (float)2.0;
      const float t2 = (float)lf_mul(t0, t1);
      w1.v[3] = lf_bf16_store((float)t2);
    }
    *(lf_pack4<unsigned short>*)(b1 + p0) = w1;
  }
}

extern "C" __global__ void __launch_bounds__(256) row_max(const float* __restrict__ b0, float* __restrict__ b1) {
  const int lane = threadIdx.x % 32;
  for (int p = (int)blockIdx.x * 8 + threadIdx.x / 32; p < 64; p += (int)gridDim.x * 8) {
    const int v0 = p;
    float a2 = (-__int_as_float(0x7f800000));
    for (int q = lane; q < 1000; q += 32) {
      const int r0 = q;
      const float t0 = (float)b0[(v0 * 1000 + r0)];
      const float t1 = (float)lf_exp(t0);
      a2 = lf_max::f(a2, (float)t1);
    }
    a2 = lf_group_reduce<lf_max, 32>(a2, (float*)0);
    const float t2 = (float)a2;
    if (lane == 0) {
      b1[v0] = (float)t2;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) short_row_sum(const int* __restrict__ b0, int* __restrict__ b1) {
  const int lane = threadIdx.x % 8;
  for (int pw = (int)blockIdx.x * 32 + threadIdx.x / 32 * 4; pw < 77; pw += (int)gridDim.x * 32) {
    const int pg = pw + threadIdx.x % 32 / 8;
    const bool live = pg < 77;
    const int p = live ? pg : 76;
    const int v0 = p;
    int a1 = (int)0;
    for (int q = lane; q < 100; q += 8) {
      const int r0 = q;
      const int t0 = (int)b0[(v0 * 100 + r0)];
      a1 = lf_sum::f(a1, (int)t0);
    }
    a1 = lf_group_reduce<lf_sum, 8>(a1, (int*)0);
    const int t1 = (int)a1;
    if (lane == 0 && live) {
      b1[v0] = (int)t1;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) row_argmin(const unsigned short* __restrict__ b0, lf_i64* __restrict__ b1, unsigned char* __restrict__ lf_ws, unsigned int* __restrict__ lf_done) {
  __shared__ float s1[8];
  __shared__ lf_i64 si1[8];
  __shared__ bool lf_last;
  const int lf_pb = (int)(blockIdx.x / 2);
  const int lf_s = (int)(blockIdx.x % 2);
  const int lane = threadIdx.x;
  const int p = lf_pb;
  {
    const int v0 = p;
    const int q1lo = (int)(20000LL * lf_s / 2), q1hi = (int)(20000LL * (lf_s + 1) / 2);
    float a1 = __int_as_float(0x7f800000);
    lf_i64 x1 = q1lo + lane;
    for (int q = q1lo + lane; q < q1hi; q += 256) {
      const int r0 = q;
      const float t0 = (float)lf_h2f(b0[(v0 * 20000 + r0)]);
      const bool take = a1 == a1 && ((float)t0 != (float)t0 || (float)t0 < a1);
      a1 = take ? (float)t0 : a1;
      x1 = take ? (lf_i64)q : x1;
    }
    lf_group_arg<256>(a1, x1, false, s1, si1);
    if (lane == 0) {
      *(float*)(lf_ws + (((lf_i64)p * 2 + lf_s) * 1 + 0) * 16) = a1;
      *(lf_i64*)(lf_ws + (((lf_i64)p * 2 + lf_s) * 1 + 0) * 16 + 8) = x1;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) lf_last = atomicAdd(&lf_done[lf_pb], 1u) == 2 - 1;
    __syncthreads();
    if (!lf_last) return;
    __threadfence();
    if (lane == 0) {
      a1 = __int_as_float(0x7f800000);
      for (int j = 0; j < 2; ++j) {
        const float v = *(volatile const float*)(lf_ws + (((lf_i64)p * 2 + j) * 1 + 0) * 16);
        const lf_i64 vi = *(volatile const lf_i64*)(lf_ws + (((lf_i64)p * 2 + j) * 1 + 0) * 16 + 8);
        if (j == 0 || lf_arg_takes(a1, x1, v, vi, false)) { a1 = v; x1 = vi; }
      }
      const lf_i64 t1 = (lf_i64)x1;
      b1[v0] = (lf_i64)t1;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) variance_rows(const unsigned short* __restrict__ b0, float* __restrict__ b1) {
  const int lane = threadIdx.x % 32;
  for (int p = (int)blockIdx.x * 8 + threadIdx.x / 32; p < 512; p += (int)gridDim.x * 8) {
    const int v0 = p;
    float a1 = (float)0.0;
    for (int q = lane; q < 3000; q += 32) {
      const int r0 = q;
      const float t0 = (float)lf_bf16_load(b0[(v0 * 3000 + r0)]);
      a1 = lf_sum::f(a1, (float)t0);
    }
    a1 = lf_group_reduce<lf_sum, 32>(a1, (float*)0);
    const float t1 = (float)a1;
    const float t2 = (float)3000.0;
    const float t3 = (float)lf_div(t1, t2);
    float a7 = (float)0.0;
    for (int q = lane; q < 3000; q += 32) {
      const int r0 = q;
      const float t4 = (float)lf_bf16_load(b0[(v0 * 3000 + r0)]);
      const float t5 = (float)lf_sub(t4, t3);
      const float t6 = (float)lf_mul(t5, t5);
      a7 = lf_sum::f(a7, (float)t6);
    }
    a7 = lf_group_reduce<lf_sum, 32>(a7, (float*)0);
    const float t7 = (float)a7;
    const float t8 = (float)3000.0;
    const float t9 = (float)lf_div(t7, t8);
    if (lane == 0) {
      b1[v0] = (float)t9;
    }
  }
}

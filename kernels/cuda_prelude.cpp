// The CUDA C++ dialect of the GPU target: the text every rendered source starts with (its fixed
// head and tail around each kernel function's CUDA spelling from the table of Note [Kernel
// functions]), and how types and literals are spelled in it. Used by kernels/cuda_codegen.cpp.

#include "kernels/detail/cuda_dialect.h"

#include "kernels/detail/render_text.h"
#include "lazy_ir/check.h"
#include "lowering/kernel_functions.h"
#include "lowering/kernel_ir.h"

#include <cmath>
#include <limits>
#include <string>

namespace lazyfuse::detail {

// Note [CUDA prelude]
// The prelude is kCudaPreludeHead, then the `cuda` spelling of each row of the kernel function
// table (Note [Kernel function table]) on lines of its own, in the table's order, then
// kCudaPreludeTail. The rendered source includes no header (NVRTC then compiles a graph's kernels
// in well under a second, and needs no include path): the CUDA math functions are NVRTC built-ins.
// The lf_<fn> functions follow eager PyTorch's CUDA kernels, which match its CPU ones
// (Note [CPU prelude]): maximum/minimum propagate NaN, remainder takes the divisor's sign, round is
// rint (half to even), integer pow squares and maps negative exponents like ATen, and a pow whose
// exponent is a Scalar (lf_pow_uniform) takes ATen's pow_tensor_scalar shortcuts for 2, 3, 0.5,
// -0.5, -1 and -2 (sqrt(-inf) is NaN where pow(-inf, 0.5) is inf: eager's answer is the
// shortcut's).
// A floating division by a Scalar (lf_div_by_scalar: div's by a Python number or CPU scalar,
// mean's by its count) multiplies by the reciprocal, as eager's CUDA div and mean do; the CPU
// prelude divides, as eager's CPU kernels do. The foreach ops divide on both.
// Signed integer add, sub, mul and neg go through unsigned arithmetic (lf_wide) because signed
// overflow is undefined in C++ and eager's wraps; a float becomes uint8 through int64 as in
// c10 (the renderer writes that cast). Half and BFloat16 are their 16 bits: half converts with
// PTX `cvt` (round to nearest even), bfloat16 by a shift and c10::BFloat16's rounding.
// Float-to-integer casts are PTX's saturating ones, as in eager's CUDA kernels.
//
// Reductions of a group of G threads (1, 8, a warp, or a block of 256) fold a lane's share in
// order, then combine lanes with shuffles down to lane 0 (and, for a block, warp results in
// shared memory in warp order) and broadcast lane 0's value, so every lane continues with the
// same bits and the result does not depend on timing. argmax/argmin keep the first extreme (or
// first NaN): lanes combine by value, then by the smaller index.
//
// The same text also compiles as host C++ under the emulation shim of Note [CUDA emulation]
// (LF_CUDA_EMULATION): the only device-specific code, the PTX conversions, has a host twin.

// The fixed text before the kernel functions' definitions: types, the macros the rows of the
// kernel function table write them with, and the Half and BFloat16 conversions.
const char* const kCudaPreludeHead = R"LF(// lazyfuse CUDA kernels
typedef long long lf_i64;
typedef unsigned char lf_u8;
template <class T> struct alignas(4 * sizeof(T)) lf_pack4 { T v[4]; };
template <class T> struct lf_wide { typedef T type; };
template <> struct lf_wide<int> { typedef unsigned int type; };
template <> struct lf_wide<long long> { typedef unsigned long long type; };
#define LF_D static __device__ __forceinline__
#define LF_W(T) typename lf_wide<T>::type
template <class A, class B> LF_D auto lf_imin(A a, B b) -> decltype(a + b) {
  return a < b ? (decltype(a + b))a : (decltype(a + b))b;
}
template <class A, class B> LF_D auto lf_imax(A a, B b) -> decltype(a + b) {
  return a > b ? (decltype(a + b))a : (decltype(a + b))b;
}
#ifdef LF_CUDA_EMULATION
LF_D float lf_h2f(unsigned short h) { return lf_emu_h2f(h); }
LF_D unsigned short lf_f2h(float f) { return lf_emu_f2h(f); }
#else
LF_D float lf_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
LF_D unsigned short lf_f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#endif
LF_D float lf_bf16_load(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }
LF_D unsigned short lf_bf16_store(float f) {
  unsigned int u = __float_as_uint(f);
  unsigned int bias = ((u >> 16) & 1u) + 0x7FFFu;
  return f != f ? (unsigned short)0x7FC0 : (unsigned short)((u + bias) >> 16);
}
#define LF_FLOAT1(fn, c) \
  LF_D float lf_##fn(float x) { return c##f(x); } \
  LF_D double lf_##fn(double x) { return c(x); }
#define LF_FLOAT2(fn, c) \
  LF_D float lf_##fn(float x, float y) { return c##f(x, y); } \
  LF_D double lf_##fn(double x, double y) { return c(x, y); }
#define LF_ANY1(fn, expr) template <class T> LF_D T lf_##fn(T a) { return (T)(expr); }
#define LF_ANY2(fn, expr) template <class T> LF_D T lf_##fn(T a, T b) { return (T)(expr); }
#define LF_BOOL1(fn, expr) template <class T> LF_D bool lf_##fn(T a) { return expr; }
#define LF_BOOL2(fn, expr) template <class T> LF_D bool lf_##fn(T a, T b) { return expr; }
)LF";

// The fixed text after them: the group reductions of Note [CUDA prelude].
const char* const kCudaPreludeTail =
    R"LF(struct lf_sum { template <class T> LF_D T f(T a, T b) { return lf_add(a, b); } };
struct lf_prod { template <class T> LF_D T f(T a, T b) { return lf_mul(a, b); } };
struct lf_max {
  template <class T> LF_D T f(T a, T b) { return a != a ? a : ((b != b || b > a) ? b : a); }
};
struct lf_min {
  template <class T> LF_D T f(T a, T b) { return a != a ? a : ((b != b || b < a) ? b : a); }
};
template <class T> LF_D T lf_shfl_down(T v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
template <class T> LF_D T lf_shfl_from(T v, int lane, int width) {
  return __shfl_sync(0xffffffffu, v, lane, width);
}
#define LF_SHFL_INT(T) \
  LF_D T lf_shfl_down(T v, int d) { return (T)__shfl_down_sync(0xffffffffu, (int)v, d); } \
  LF_D T lf_shfl_from(T v, int lane, int width) { \
    return (T)__shfl_sync(0xffffffffu, (int)v, lane, width); \
  }
LF_SHFL_INT(bool) LF_SHFL_INT(signed char) LF_SHFL_INT(unsigned char) LF_SHFL_INT(short)
/// The fold of `v` over a group of G consecutive lanes (G = 1, 8, 32, or the block of 256),
/// the same in every lane. `smem` holds 8 values; see Note [CUDA prelude].
template <class Op, int G, class T> LF_D T lf_group_reduce(T v, T* smem) {
  if (G == 1) return v;
  const int width = G < 32 ? G : 32;
  for (int d = width / 2; d > 0; d /= 2) v = Op::f(v, lf_shfl_down(v, d));
  v = lf_shfl_from(v, 0, width);
  if (G <= 32) return v;
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  T r = smem[0];
  for (int w = 1; w < G / 32; ++w) r = Op::f(r, smem[w]);
  __syncthreads();
  return r;
}
/// Whether (vb, ib) wins over (va, ia) for argmax (max) or argmin: the first NaN, else the
/// extreme value, else the smaller index.
template <class T> LF_D bool lf_arg_takes(T va, lf_i64 ia, T vb, lf_i64 ib, bool max) {
  const bool na = va != va, nb = vb != vb;
  if (na || nb) return nb && (!na || ib < ia);
  if (vb == va) return ib < ia;
  return max ? vb > va : vb < va;
}
template <int G, class T> LF_D void lf_group_arg(T& v, lf_i64& i, bool max, T* smem_v, lf_i64* smem_i) {
  if (G == 1) return;
  const int width = G < 32 ? G : 32;
  for (int d = width / 2; d > 0; d /= 2) {
    const T ov = lf_shfl_down(v, d);
    const lf_i64 oi = lf_shfl_down(i, d);
    if (lf_arg_takes(v, i, ov, oi, max)) { v = ov; i = oi; }
  }
  v = lf_shfl_from(v, 0, width);
  i = lf_shfl_from(i, 0, width);
  if (G <= 32) return;
  if (threadIdx.x % 32 == 0) { smem_v[threadIdx.x / 32] = v; smem_i[threadIdx.x / 32] = i; }
  __syncthreads();
  v = smem_v[0];
  i = smem_i[0];
  for (int w = 1; w < G / 32; ++w) {
    if (lf_arg_takes(v, i, smem_v[w], smem_i[w], max)) { v = smem_v[w]; i = smem_i[w]; }
  }
  __syncthreads();
}
)LF";

const char* cudaPrelude() {
  static const std::string kPrelude =
      preludeText(kCudaPreludeHead, &KernelFunction::cuda, kCudaPreludeTail);
  return kPrelude.c_str();
}

const char* cudaComputeType(c10::ScalarType dtype) { return cComputeType(dtype); }

const char* cudaStorageType(c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Bool) return "lf_u8";
  if (dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16) {
    return "unsigned short";
  }
  return cudaComputeType(dtype);
}

std::string cudaLiteral(c10::ScalarType dtype, double fvalue, int64_t ivalue) {
  if (dtype == c10::ScalarType::Bool) return ivalue != 0 ? "true" : "false";
  std::string type = cudaComputeType(dtype);
  if (dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Double) {
    const bool f32 = dtype == c10::ScalarType::Float;
    if (std::isnan(fvalue)) {
      return f32 ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)";
    }
    if (std::isinf(fvalue)) {
      std::string inf =
          f32 ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)";
      return fvalue < 0 ? "(-" + inf + ")" : inf;
    }
    return "(" + type + ")" + finiteFloatText(fvalue);
  }
  return "(" + type + ")" + ixText(ixConst(ivalue));
}

std::string cudaExtremeLiteral(c10::ScalarType dtype, bool lowest) {
  auto integer = [&](auto limits) {
    using L = decltype(limits);
    return cudaLiteral(dtype, 0, lowest ? static_cast<int64_t>(L::lowest()) : L::max());
  };
  switch (dtype) {
    case c10::ScalarType::Bool: return lowest ? "false" : "true";
    case c10::ScalarType::Byte: return integer(std::numeric_limits<uint8_t>());
    case c10::ScalarType::Char: return integer(std::numeric_limits<int8_t>());
    case c10::ScalarType::Short: return integer(std::numeric_limits<int16_t>());
    case c10::ScalarType::Int: return integer(std::numeric_limits<int32_t>());
    case c10::ScalarType::Long: return integer(std::numeric_limits<int64_t>());
    default: return cudaLiteral(dtype, lowest ? -INFINITY : INFINITY, 0);
  }
}

}  // namespace lazyfuse::detail

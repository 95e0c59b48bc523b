// The C dialect of the CPU target: the fixed text every rendered source starts with (the C math
// functions it calls and one lf_<fn> overload set per kernel function of Note [Kernel functions]),
// and how types and literals are spelled in it. Used by kernels/cpu_codegen.cpp.

#include "kernels/detail/cpu_dialect.h"
#include "kernels/detail/render_text.h"

#include "lazy_ir/check.h"
#include "lowering/kernel_ir.h"

#include <cmath>
#include <string>

namespace lazyfuse {
namespace detail {
namespace {

std::string floatLiteral(double value) {
  if (std::isnan(value)) return "__builtin_nan(\"\")";
  if (std::isinf(value)) return value < 0 ? "(-__builtin_inf())" : "__builtin_inf()";
  return finiteFloatText(value);
}

}  // namespace

// Note [CPU prelude]
// The rendered source includes no header, so a kernel compiles in a fraction of the time
// <cmath> would cost; it declares the C math functions itself. Those glibc's libmvec implements
// are marked `omp declare simd`, so that GCC (with -fopenmp-simd) vectorizes a loop calling them
// through libmvec. Which ones exist depends on the glibc version, so the compiler passes
// LF_MVEC (0: none, 1: glibc 2.22's exp log sin cos pow, 2: the glibc 2.35 set) as a flag; the
// source stays the same and the flag is in the cache key. See Note [CPU kernel cache key].
//
// The lf_<fn> functions follow eager PyTorch's CPU kernels: maximum/minimum return NaN when
// either side is NaN (else std::max/std::min, which keep the left operand on ties); remainder
// takes the sign of the divisor as at::remainder does; round is half to even (as nearbyint under
// the default rounding mode); sign(NaN) is 0 as in ATen; integer pow squares, and a negative
// exponent gives 1, -1 or 0 the way ATen's pow_impl does. A floating pow whose exponent is the
// same for the whole loop (a Scalar) is lf_pow_uniform: like ATen's pow(Tensor, Scalar) it gives
// 1 for the exponent 0 and the base itself for 1 (NaN included: ATen fills and copies there; the
// exponent 1 is what square's backward, 2 * pow(x, 1), asks for), and like its
// pow_tensor_scalar kernel it computes the exponents 2, 3, 0.5, -0.5, -1 and -2 by
// multiplication, sqrt and division, which
// is also what makes it fast (the compiler unswitches the loop on the exponent and vectorizes
// each version; powf through libmvec costs some 10 ns an element). Every integer result is cast
// back to its type, and the code is built with -fwrapv, so integer arithmetic wraps as eager's
// does.
// maximum and minimum choose with lf_select, which picks a float's bits with a mask instead of
// branching: GCC 12 does not if-convert a loop that has both a branch and a libmvec call, so a
// clamp after an exp left the whole loop scalar (Note [CPU compile flags] has the other case).
// floor, ceil, trunc and round (half to even) of a float or double are computed, not called:
// (|x| + 2^23) - 2^23 rounds |x| to an integer under the default rounding mode (2^52 for
// double), the sign and -0 come back with copysign, and values that are integers already
// (|x| >= 2^23), infinities and NaN pass through. GCC vectorizes its own floorf & co only under
// -fno-trapping-math, which also lets it fold (float)(long)x into truncf(x) and so changes the
// result for NaN and out-of-range values; these need neither.
// lf_max and lf_min are the OpenMP reductions a vectorized floating max/min loop combines its
// lanes with: they keep a NaN, as the fold itself does, where OpenMP's max would drop it.
// Bool buffers are bytes read with `!= 0`. BFloat16 is its 16 bits, loaded by a shift and stored
// with c10::BFloat16's round to nearest even (NaN stays NaN). Half is its 16 bits as well,
// converted by integer and float arithmetic with no branch (the IEEE conversion c10::Half does,
// subnormals, infinities and NaN included): GCC 12 has no vector type for _Float16 without
// AVX512-FP16, so a loop that loaded or stored one ran one element at a time. Contiguous Half
// loads and stores of a row loop go through lf_half_block_load/store instead (Note [Half
// blocks] in kernels/cpu_codegen.cpp): F16C's vcvtph2ps/vcvtps2ph (round to nearest even, the
// same numbers, subnormals included) eight at a time, or the same functions as a loop where the
// CPU has no F16C.
const char* const kCpuPrelude = R"LF(// lazyfuse CPU kernels
typedef long long lf_i64;
typedef unsigned char lf_u8;
#if defined(LF_MVEC) && LF_MVEC >= 1
#define LF_SIMD1 _Pragma("omp declare simd notinbranch")
#else
#define LF_SIMD1
#endif
#if defined(LF_MVEC) && LF_MVEC >= 2
#define LF_SIMD2 _Pragma("omp declare simd notinbranch")
#else
#define LF_SIMD2
#endif
#define LF_DECLARE1(S, c) \
  S extern "C" float c##f(float); \
  S extern "C" double c(double);
#define LF_DECLARE2(S, c) \
  S extern "C" float c##f(float, float); \
  S extern "C" double c(double, double);
LF_DECLARE1(LF_SIMD1, exp) LF_DECLARE1(LF_SIMD1, log) LF_DECLARE1(LF_SIMD1, sin)
LF_DECLARE1(LF_SIMD1, cos) LF_DECLARE2(LF_SIMD1, pow)
LF_DECLARE1(LF_SIMD2, exp2) LF_DECLARE1(LF_SIMD2, expm1) LF_DECLARE1(LF_SIMD2, log2)
LF_DECLARE1(LF_SIMD2, log10) LF_DECLARE1(LF_SIMD2, log1p) LF_DECLARE1(LF_SIMD2, tan)
LF_DECLARE1(LF_SIMD2, asin) LF_DECLARE1(LF_SIMD2, acos) LF_DECLARE1(LF_SIMD2, atan)
LF_DECLARE1(LF_SIMD2, sinh) LF_DECLARE1(LF_SIMD2, cosh) LF_DECLARE1(LF_SIMD2, tanh)
LF_DECLARE1(LF_SIMD2, asinh) LF_DECLARE1(LF_SIMD2, acosh) LF_DECLARE1(LF_SIMD2, atanh)
LF_DECLARE1(LF_SIMD2, erf) LF_DECLARE1(LF_SIMD2, erfc) LF_DECLARE2(LF_SIMD2, atan2)
LF_DECLARE2(LF_SIMD2, hypot)
LF_DECLARE1(, sqrt) LF_DECLARE1(, fabs) LF_DECLARE1(, lgamma) LF_DECLARE2(, fmod)
LF_DECLARE2(, copysign)
#define LF_FLOAT1(fn, c) \
  static inline float lf_##fn(float x) { return c##f(x); } \
  static inline double lf_##fn(double x) { return c(x); }
#define LF_FLOAT2(fn, c) \
  static inline float lf_##fn(float x, float y) { return c##f(x, y); } \
  static inline double lf_##fn(double x, double y) { return c(x, y); }
#define LF_ANY1(fn, expr) template <class T> static inline T lf_##fn(T a) { return (T)(expr); }
#define LF_ANY2(fn, expr) \
  template <class T> static inline T lf_##fn(T a, T b) { return (T)(expr); }
#define LF_BOOL1(fn, expr) template <class T> static inline bool lf_##fn(T a) { return expr; }
#define LF_BOOL2(fn, expr) \
  template <class T> static inline bool lf_##fn(T a, T b) { return expr; }
static inline lf_i64 lf_imin(lf_i64 a, lf_i64 b) { return a < b ? a : b; }
static inline lf_i64 lf_imax(lf_i64 a, lf_i64 b) { return a > b ? a : b; }
static inline float lf_bits_float(unsigned int u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
static inline unsigned int lf_float_bits(float f) {
  unsigned int u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
static inline float lf_bf16_load(unsigned short h) { return lf_bits_float((unsigned int)h << 16); }
static inline unsigned short lf_bf16_store(float f) {
  unsigned int u = lf_float_bits(f);
  unsigned int bias = ((u >> 16) & 1u) + 0x7FFFu, nan = (unsigned int)0 - (unsigned int)(f != f);
  return (unsigned short)((0x7FC0u & nan) | (((u + bias) >> 16) & ~nan));
}
static inline float lf_half_load(unsigned short h) {
  unsigned int w = (unsigned int)h << 16, sign = w & 0x80000000u, twice = w + w;
  float normal = lf_bits_float((twice >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  float subnormal = lf_bits_float((twice >> 17) | (126u << 23)) - 0.5f;
  unsigned int m = (unsigned int)0 - (unsigned int)(twice < (1u << 27));
  return lf_bits_float(sign | (lf_float_bits(subnormal) & m) | (lf_float_bits(normal) & ~m));
}
static inline unsigned short lf_half_store(float f) {
  float scaled = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
  unsigned int w = lf_float_bits(f), twice = w + w, sign = w & 0x80000000u;
  unsigned int bias = twice & 0xFF000000u;
  unsigned int small = (unsigned int)0 - (unsigned int)(bias < 0x71000000u);
  bias = (0x71000000u & small) | (bias & ~small);
  unsigned int r = lf_float_bits(lf_bits_float((bias >> 1) + 0x07800000u) + scaled);
  unsigned int finite = ((r >> 13) & 0x7C00u) + (r & 0x0FFFu);
  unsigned int nan = (unsigned int)0 - (unsigned int)(twice > 0xFF000000u);
  return (unsigned short)((sign >> 16) | (0x7E00u & nan) | (finite & ~nan));
}
static inline float lf_round_to_half(float f) { return lf_half_load(lf_half_store(f)); }
static inline float lf_round_to_bfloat16(float f) { return lf_bf16_load(lf_bf16_store(f)); }
#if defined(__F16C__)
typedef short lf_v8hi __attribute__((vector_size(16)));
typedef float lf_v8sf __attribute__((vector_size(32)));
static inline void lf_half_block_load(float* dst, const unsigned short* src, lf_i64 n) {
  lf_i64 i = 0;
  for (; i + 8 <= n; i += 8) {
    lf_v8hi h;
    __builtin_memcpy(&h, src + i, 16);
    const lf_v8sf f = __builtin_ia32_vcvtph2ps256(h);
    __builtin_memcpy(dst + i, &f, 32);
  }
  for (; i < n; ++i) dst[i] = lf_half_load(src[i]);
}
static inline void lf_half_block_store(unsigned short* dst, const float* src, lf_i64 n) {
  lf_i64 i = 0;
  for (; i + 8 <= n; i += 8) {
    lf_v8sf f;
    __builtin_memcpy(&f, src + i, 32);
    lf_v8hi h = __builtin_ia32_vcvtps2ph256(f, 0);
    __asm__("" : "+x"(h));  // a register, then a store: vcvtps2ph to memory is slow on Zen 4
    __builtin_memcpy(dst + i, &h, 16);
  }
  for (; i < n; ++i) dst[i] = lf_half_store(src[i]);
}
#else
static inline void lf_half_block_load(float* dst, const unsigned short* src, lf_i64 n) {
#pragma omp simd
  for (lf_i64 i = 0; i < n; ++i) dst[i] = lf_half_load(src[i]);
}
static inline void lf_half_block_store(unsigned short* dst, const float* src, lf_i64 n) {
#pragma omp simd
  for (lf_i64 i = 0; i < n; ++i) dst[i] = lf_half_store(src[i]);
}
#endif
#if defined(__AVX__)
typedef long long lf_v4di __attribute__((vector_size(32)));
static inline void lf_stream(void* dst, const void* src, lf_i64 bytes) {
  char* d = (char*)dst;
  const char* s = (const char*)src;
  lf_i64 i = (lf_i64)((32 - ((unsigned long long)d & 31)) & 31);
  if (i > bytes) i = bytes;
  __builtin_memcpy(d, s, i);
  for (; i + 32 <= bytes; i += 32) {
    lf_v4di v;
    __builtin_memcpy(&v, s + i, 32);
    __builtin_ia32_movntdq256((lf_v4di*)(d + i), v);
  }
  __builtin_memcpy(d + i, s + i, bytes - i);
}
static inline void lf_stream_fence() { __builtin_ia32_sfence(); }
#else
static inline void lf_stream(void* dst, const void* src, lf_i64 bytes) {
  __builtin_memcpy(dst, src, bytes);
}
static inline void lf_stream_fence() {}
#endif
LF_FLOAT1(exp, exp) LF_FLOAT1(exp2, exp2) LF_FLOAT1(expm1, expm1) LF_FLOAT1(log, log)
LF_FLOAT1(log2, log2) LF_FLOAT1(log10, log10) LF_FLOAT1(log1p, log1p) LF_FLOAT1(sqrt, sqrt)
LF_FLOAT1(sin, sin) LF_FLOAT1(cos, cos) LF_FLOAT1(tan, tan) LF_FLOAT1(asin, asin)
LF_FLOAT1(acos, acos) LF_FLOAT1(atan, atan) LF_FLOAT1(sinh, sinh) LF_FLOAT1(cosh, cosh)
LF_FLOAT1(tanh, tanh) LF_FLOAT1(asinh, asinh) LF_FLOAT1(acosh, acosh) LF_FLOAT1(atanh, atanh)
LF_FLOAT1(erf, erf) LF_FLOAT1(erfc, erfc) LF_FLOAT1(lgamma, lgamma)
LF_FLOAT2(atan2, atan2) LF_FLOAT2(fmod, fmod) LF_FLOAT2(copysign, copysign)
LF_FLOAT2(hypot, hypot)
LF_ANY1(neg, -a) LF_ANY1(abs, a < 0 ? -a : a) LF_ANY1(sign, (T(0) < a) - (a < T(0)))
LF_ANY1(floor, a) LF_ANY1(ceil, a) LF_ANY1(round, a) LF_ANY1(trunc, a)
LF_ANY1(bitwise_not, ~a) LF_ANY1(reciprocal, T(1) / a) LF_ANY1(rsqrt, T(1) / lf_sqrt(a))
LF_ANY1(sigmoid, T(1) / (T(1) + lf_exp(-a)))
LF_FLOAT1(abs, fabs)
#define LF_ROUNDING(T, M, cs, fabs) \
  static inline T lf_round(T a) { \
    T m = (T)(M), ax = fabs(a), r = cs((ax + m) - m, a); \
    return lf_select(ax < m, r, a); \
  } \
  static inline T lf_floor(T a) { \
    T r = lf_round(a); \
    return lf_select(fabs(a) < (T)(M), cs(r - (T)(r > a), a), a); \
  } \
  static inline T lf_ceil(T a) { \
    T r = lf_round(a); \
    return lf_select(fabs(a) < (T)(M), cs(r + (T)(r < a), a), a); \
  } \
  static inline T lf_trunc(T a) { \
    T ax = fabs(a), r = lf_round(ax); \
    return lf_select(ax < (T)(M), cs(r - (T)(r > ax), a), a); \
  }
static inline bool lf_bitwise_not(bool a) { return !a; }
LF_BOOL1(logical_not, !(a != 0)) LF_BOOL1(isnan, a != a) LF_BOOL1(isinf, false)
static inline bool lf_isinf(float a) { return __builtin_isinf(a); }
static inline bool lf_isinf(double a) { return __builtin_isinf(a); }
LF_ANY2(add, a + b) LF_ANY2(sub, a - b) LF_ANY2(mul, a * b) LF_ANY2(div, a / b)
// A division by a Scalar divides, as eager's CPU div does (the CUDA prelude multiplies by the
// reciprocal, as eager's CUDA div does).
LF_ANY2(div_by_scalar, a / b)
template <class T> static inline T lf_select(bool c, T x, T y) { return c ? x : y; }
#define LF_SELECT_BITS(T, U) \
  static inline T lf_select(bool c, T x, T y) { \
    U xi, yi, m = (U)0 - (U)c; \
    __builtin_memcpy(&xi, &x, sizeof(T)); \
    __builtin_memcpy(&yi, &y, sizeof(T)); \
    U ri = (xi & m) | (yi & ~m); \
    T r; \
    __builtin_memcpy(&r, &ri, sizeof(T)); \
    return r; \
  }
LF_SELECT_BITS(float, unsigned int) LF_SELECT_BITS(double, unsigned long long)
LF_ROUNDING(float, 8388608.0f, __builtin_copysignf, __builtin_fabsf)
LF_ROUNDING(double, 4503599627370496.0, __builtin_copysign, __builtin_fabs)
LF_ANY2(maximum, lf_select(a != a, a, lf_select(b != b, b, lf_select(a < b, b, a))))
LF_ANY2(minimum, lf_select(a != a, a, lf_select(b != b, b, lf_select(b < a, b, a))))
LF_ANY2(bitwise_and, a & b) LF_ANY2(bitwise_or, a | b) LF_ANY2(bitwise_xor, a ^ b)
LF_BOOL2(eq, a == b) LF_BOOL2(ne, a != b) LF_BOOL2(lt, a < b) LF_BOOL2(le, a <= b)
LF_BOOL2(gt, a > b) LF_BOOL2(ge, a >= b)
LF_BOOL2(logical_and, (a != 0) && (b != 0)) LF_BOOL2(logical_or, (a != 0) || (b != 0))
LF_BOOL2(logical_xor, (a != 0) != (b != 0))
template <class T> static inline T lf_pow(T a, T b) {
  if (b < 0) return a == 1 ? T(1) : (a == -1 ? (T)((b & 1) ? -1 : 1) : T(0));
  lf_i64 r = 1, x = a, e = b;
  for (; e != 0; e >>= 1, x *= x) {
    if (e & 1) r *= x;
  }
  return (T)r;
}
LF_FLOAT2(pow, pow)
#define LF_POW_UNIFORM(T, pw, root) \
  static inline T lf_pow_uniform(T a, T b) { \
    if (b == (T)0) return (T)1; \
    if (b == (T)1) return a; \
    if (b == (T)2) return a * a; \
    if (b == (T)3) return a * a * a; \
    if (b == (T)0.5) return root(a); \
    if (b == (T)-0.5) return (T)1 / root(a); \
    if (b == (T)-1) return (T)1 / a; \
    if (b == (T)-2) return (T)1 / (a * a); \
    return pw(a, b); \
  }
LF_POW_UNIFORM(float, powf, sqrtf) LF_POW_UNIFORM(double, pow, sqrt)
#pragma omp declare reduction(lf_max : float, double : \
    omp_out = (omp_in != omp_in || omp_in > omp_out) ? omp_in : omp_out) \
    initializer(omp_priv = -__builtin_inf())
#pragma omp declare reduction(lf_min : float, double : \
    omp_out = (omp_in != omp_in || omp_in < omp_out) ? omp_in : omp_out) \
    initializer(omp_priv = __builtin_inf())
static inline float lf_remainder(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
static inline double lf_remainder(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
)LF";

const char* cpuPrelude() {
  return kCpuPrelude;
}

/// The C type an instruction of `dtype` computes in; see Note [Kernel IR].
const char* cpuComputeType(c10::ScalarType dtype) {
  return cComputeType(dtype);
}

/// Element type of a buffer: Bool is a byte read as `!= 0`; see Note [CPU prelude].
const char* cpuStorageType(c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Bool) return "lf_u8";
  if (dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16) {
    return "unsigned short";
  }
  return cpuComputeType(dtype);
}

std::string cpuLiteral(c10::ScalarType dtype, double fvalue, int64_t ivalue) {
  if (dtype == c10::ScalarType::Bool) return ivalue != 0 ? "true" : "false";
  std::string type = cpuComputeType(dtype);
  bool floating = dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Double;
  if (floating) return "(" + type + ")" + floatLiteral(fvalue);
  return "(" + type + ")" + ixText(ixConst(ivalue));
}

/// The smallest (lowest) or largest value of a compute type: the identity of max (min).
std::string cpuExtremeLiteral(c10::ScalarType dtype, bool lowest) {
  double inf = lowest ? -INFINITY : INFINITY;
  switch (dtype) {
    case c10::ScalarType::Bool: return lowest ? "false" : "true";
    case c10::ScalarType::Byte: return cpuLiteral(dtype, 0, lowest ? 0 : 255);
    case c10::ScalarType::Char: return cpuLiteral(dtype, 0, lowest ? -128 : 127);
    case c10::ScalarType::Short: return cpuLiteral(dtype, 0, lowest ? -32768 : 32767);
    case c10::ScalarType::Int: return cpuLiteral(dtype, 0, lowest ? INT32_MIN : INT32_MAX);
    case c10::ScalarType::Long: return cpuLiteral(dtype, 0, lowest ? INT64_MIN : INT64_MAX);
    default: return cpuLiteral(dtype, inf, 0);
  }
}

}  // namespace detail
}  // namespace lazyfuse

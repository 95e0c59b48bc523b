// The C dialect of the CPU target: the text every rendered source starts with (its fixed head and
// tail around each kernel function's CPU spelling from the table of Note [Kernel functions]), and
// how types and literals are spelled in it. Used by kernels/cpu_codegen.cpp.

#include "kernels/detail/cpu_dialect.h"
#include "kernels/detail/render_text.h"

#include "lazy_ir/check.h"
#include "lowering/kernel_functions.h"
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
// The prelude is kCpuPreludeHead, then the `cpu` spelling of each row of the kernel function table
// (lowering/kernel_functions.cpp, Note [Kernel function table]) on lines of its own, in the table's
// order, then kCpuPreludeTail. The rendered source includes no header, so a kernel compiles in a
// fraction of the time <cmath> would cost; each row declares the C math functions it calls. Those
// glibc's libmvec implements are marked `omp declare simd`, so that GCC (with -fopenmp-simd)
// vectorizes a loop calling them through libmvec. Which ones exist depends on the glibc version, so
// the compiler passes LF_MVEC (0: none, 1: glibc 2.22's exp log sin cos pow, 2: the glibc 2.35 set)
// as a flag; the source stays the same and the flag is in the cache key. See
// Note [CPU kernel cache key].
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
// Note [Branch-free selects]: a floating `where` is rendered as lf_select too. Written as
// `c ? x : y`, GCC 12 if-converted it only where AVX-512 has mask registers; on AVX2 machines
// (Zen 3) a loop with a select on a loop-invariant flag (the fused Adam step's weight decay,
// a `where` after a division or sqrt) stayed scalar: 113 of the fused Adam step's 115 loops,
// a 25 ms kernel where eager's fused step takes 10 ms in all.
// floor, ceil, trunc and round (half to even) of a float or double are computed, not called:
// (|x| + 2^23) - 2^23 rounds |x| to an integer under the default rounding mode (2^52 for
// double), the sign and -0 come back with copysign, and values that are integers already
// (|x| >= 2^23), infinities and NaN pass through. GCC vectorizes its own floorf & co only under
// -fno-trapping-math, which also lets it fold (float)(long)x into truncf(x) and so changes the
// result for NaN and out-of-range values; these need neither. The step of one that floor, ceil
// and trunc add to the rounded value is chosen with lf_select as well: written as (T)(r > a),
// GCC 12 turned it into a branch for every target without AVX-512 (Zen 3, Haswell), so the loop
// stayed scalar and mispredicted on every other element (floor over 4M floats 25 ms, eager 1).
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

// The fixed text before the kernel functions' definitions: types, the macros the rows of the
// kernel function table write them with, and helpers of the renderer (Note [CPU prelude]).
const char* const kCpuPreludeHead = R"LF(// lazyfuse CPU kernels
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
#define LF_ROUNDING(F) \
  F(float, 8388608.0f, __builtin_copysignf, __builtin_fabsf) \
  F(double, 4503599627370496.0, __builtin_copysign, __builtin_fabs)
)LF";

// The fixed text after them: the OpenMP reductions of vectorized max/min loops.
const char* const kCpuPreludeTail = R"LF(#pragma omp declare reduction(lf_max : float, double : \
    omp_out = (omp_in != omp_in || omp_in > omp_out) ? omp_in : omp_out) \
    initializer(omp_priv = -__builtin_inf())
#pragma omp declare reduction(lf_min : float, double : \
    omp_out = (omp_in != omp_in || omp_in < omp_out) ? omp_in : omp_out) \
    initializer(omp_priv = __builtin_inf())
)LF";

const char* cpuPrelude() {
  static const std::string kPrelude =
      preludeText(kCpuPreludeHead, &KernelFunction::cpu, kCpuPreludeTail);
  return kPrelude.c_str();
}

/// The C type an instruction of `dtype` computes in; see Note [Kernel IR].
const char* cpuComputeType(c10::ScalarType dtype) { return cComputeType(dtype); }

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

// The table of kernel functions (Note [Kernel functions]): one row per function with everything a
// target, the checks and the tests need to know of it.

#include "lowering/kernel_functions.h"

#include "lazy_ir/check.h"

#include <ATen/core/Tensor.h>

#include <string_view>
#include <unordered_map>

namespace lazyfuse {
namespace {

constexpr FnArgs kFloating = FnArgs::kFloating, kFloat = FnArgs::kFloat,
                 kNumeric = FnArgs::kNumeric, kIntegral = FnArgs::kIntegral,
                 kBoolArgs = FnArgs::kBool, kAll = FnArgs::kAll;
constexpr FnResult kSame = FnResult::kArgs, kBool = FnResult::kBool;
constexpr bool kExpensive = true, kCheap = false;

// The reference of a function that is the ATen method `m` of its first argument.
#define LF_METHOD1(m) [](const at::Tensor& a, const at::Tensor&) { return a.m(); }
#define LF_METHOD2(m) [](const at::Tensor& a, const at::Tensor& b) { return a.m(b); }
// The row of `fn`, a unary function of floating values that is the C math function `fn` (fnf
// for Float) on both targets and ATen's method `fn`; `simd` is LF_SIMD1 or LF_SIMD2, the
// libmvec level that has it. Expensive.
// clang-format off
#define LF_MATH1(fn, simd) \
  {#fn, 1, kFloating, kSame, kExpensive, nullptr, \
   "LF_DECLARE1(" #simd ", " #fn ") LF_FLOAT1(" #fn ", " #fn ")", "LF_FLOAT1(" #fn ", " #fn ")", \
   LF_METHOD1(fn)}
// The row of comparison `fn`, `a op b` on any type with a Bool result, and ATen's method `fn`.
#define LF_COMPARISON(fn, op) \
  {#fn, 2, kAll, kBool, kCheap, nullptr, "LF_BOOL2(" #fn ", a " #op " b)", \
   "LF_BOOL2(" #fn ", a " #op " b)", LF_METHOD2(fn)}
// clang-format on

// Note [Kernel function table]
// The rows are in the order both preludes define them: a row's spellings may call the lf_
// functions of the rows above it (rsqrt calls lf_sqrt, sigmoid lf_exp, floor, ceil and trunc
// call lf_round, remainder the fmod that row declares) and the helpers of the prelude's head
// (LF_FLOAT1/2, LF_ANY1/2, LF_BOOL1/2, LF_DECLARE1/2 and LF_SIMD1/2, lf_select and
// LF_ROUNDING on the CPU; LF_D, LF_W, lf_h2f/lf_f2h and the bfloat16 conversions on CUDA). The
// CPU spelling declares the C math functions it calls, marked LF_SIMD1 or LF_SIMD2 where glibc's
// libmvec has them (Note [CPU prelude]); on CUDA they are NVRTC built-ins. A row's `args` are
// the compute types eager defines the function on and a lowering may call it with; checkKernel
// does not hold kernels to them, the tests iterate them.
// The reference is eager's CPU answer, which the spellings give (Note [CPU prelude],
// Note [CUDA prelude]): maximum/minimum give NaN when either side is NaN, remainder takes the
// divisor's sign, round is half to even, sign(NaN) is 0, integer pow of a negative exponent is 1,
// -1 or 0, and integer add, sub, mul and neg wrap. Eager's vectorized loop and its scalar loop
// (which takes what is left after the vectors) disagree in places: maximum(0, -0) and
// minimum(0, -0) keep either zero, and fmod and remainder by a subnormal are NaN in the
// vectorized loop but exact in the scalar one. The CPU spellings give the scalar loop's answer;
// test_kernel_functions.cpp accepts either.
std::vector<KernelFunction> tableRows() {
  return {
      // Unary functions of floating values, a C math function each.
      LF_MATH1(exp, LF_SIMD1),
      LF_MATH1(exp2, LF_SIMD2),
      LF_MATH1(expm1, LF_SIMD2),
      LF_MATH1(log, LF_SIMD1),
      LF_MATH1(log2, LF_SIMD2),
      LF_MATH1(log10, LF_SIMD2),
      LF_MATH1(log1p, LF_SIMD2),
      {"sqrt", 1, kFloating, kSame, kCheap, nullptr, "LF_DECLARE1(, sqrt) LF_FLOAT1(sqrt, sqrt)",
       "LF_FLOAT1(sqrt, sqrt)", LF_METHOD1(sqrt)},
      LF_MATH1(sin, LF_SIMD1),
      LF_MATH1(cos, LF_SIMD1),
      LF_MATH1(tan, LF_SIMD2),
      LF_MATH1(asin, LF_SIMD2),
      LF_MATH1(acos, LF_SIMD2),
      LF_MATH1(atan, LF_SIMD2),
      LF_MATH1(sinh, LF_SIMD2),
      LF_MATH1(cosh, LF_SIMD2),
      LF_MATH1(tanh, LF_SIMD2),
      LF_MATH1(asinh, LF_SIMD2),
      LF_MATH1(acosh, LF_SIMD2),
      LF_MATH1(atanh, LF_SIMD2),
      LF_MATH1(erf, LF_SIMD2),
      LF_MATH1(erfc, LF_SIMD2),
      // lgamma must follow glibc's special values; libmvec has none.
      {"lgamma", 1, kFloating, kSame, kExpensive, "no vector lgamma in libmvec",
       "LF_DECLARE1(, lgamma) LF_FLOAT1(lgamma, lgamma)", "LF_FLOAT1(lgamma, lgamma)",
       LF_METHOD1(lgamma)},

      // Unary functions written out. Signed integers wrap on CUDA through unsigned arithmetic
      // (LF_W); the CPU code is built with -fwrapv.
      {"neg", 1, kNumeric, kSame, kCheap, nullptr, "LF_ANY1(neg, -a)", "LF_ANY1(neg, -(LF_W(T))a)",
       LF_METHOD1(neg)},
      {"abs", 1, kNumeric, kSame, kCheap, nullptr,
       "LF_ANY1(abs, a < 0 ? -a : a) LF_DECLARE1(, fabs) LF_FLOAT1(abs, fabs)",
       "LF_ANY1(abs, a < 0 ? -(LF_W(T))a : a) LF_FLOAT1(abs, fabs)", LF_METHOD1(abs)},
      {"sign", 1, kNumeric, kSame, kCheap, nullptr, "LF_ANY1(sign, (T(0) < a) - (a < T(0)))",
       "LF_ANY1(sign, (T(0) < a) - (a < T(0)))", LF_METHOD1(sign)},
      // Rounding of an integer is the integer. The CPU computes a float's: (|x| + 2^23) - 2^23
      // rounds |x| half to even (Note [CPU prelude]).
      {"round", 1, kNumeric, kSame, kCheap, nullptr, R"LF(LF_ANY1(round, a)
#define LF_ROUND(T, M, cs, fabs) \
  static inline T lf_round(T a) { \
    T m = (T)(M), ax = fabs(a), r = cs((ax + m) - m, a); \
    return lf_select(ax < m, r, a); \
  }
LF_ROUNDING(LF_ROUND))LF",
       "LF_ANY1(round, a) LF_FLOAT1(round, rint)", LF_METHOD1(round)},
      {"floor", 1, kNumeric, kSame, kCheap, nullptr, R"LF(LF_ANY1(floor, a)
#define LF_FLOOR(T, M, cs, fabs) \
  static inline T lf_floor(T a) { \
    T r = lf_round(a); \
    return lf_select(fabs(a) < (T)(M), cs(r - lf_select(r > a, (T)1, (T)0), a), a); \
  }
LF_ROUNDING(LF_FLOOR))LF",
       "LF_ANY1(floor, a) LF_FLOAT1(floor, floor)", LF_METHOD1(floor)},
      {"ceil", 1, kNumeric, kSame, kCheap, nullptr, R"LF(LF_ANY1(ceil, a)
#define LF_CEIL(T, M, cs, fabs) \
  static inline T lf_ceil(T a) { \
    T r = lf_round(a); \
    return lf_select(fabs(a) < (T)(M), cs(r + lf_select(r < a, (T)1, (T)0), a), a); \
  }
LF_ROUNDING(LF_CEIL))LF",
       "LF_ANY1(ceil, a) LF_FLOAT1(ceil, ceil)", LF_METHOD1(ceil)},
      {"trunc", 1, kNumeric, kSame, kCheap, nullptr, R"LF(LF_ANY1(trunc, a)
#define LF_TRUNC(T, M, cs, fabs) \
  static inline T lf_trunc(T a) { \
    T ax = fabs(a), r = lf_round(ax); \
    return lf_select(ax < (T)(M), cs(r - lf_select(r > ax, (T)1, (T)0), a), a); \
  }
LF_ROUNDING(LF_TRUNC))LF",
       "LF_ANY1(trunc, a) LF_FLOAT1(trunc, trunc)", LF_METHOD1(trunc)},
      {"bitwise_not", 1, kIntegral, kSame, kCheap, nullptr,
       "LF_ANY1(bitwise_not, ~a)\nstatic inline bool lf_bitwise_not(bool a) { return !a; }",
       "LF_ANY1(bitwise_not, ~a)\nLF_D bool lf_bitwise_not(bool a) { return !a; }",
       LF_METHOD1(bitwise_not)},
      {"reciprocal", 1, kFloating, kSame, kCheap, nullptr, "LF_ANY1(reciprocal, T(1) / a)",
       "LF_ANY1(reciprocal, T(1) / a)", LF_METHOD1(reciprocal)},
      {"rsqrt", 1, kFloating, kSame, kCheap, nullptr, "LF_ANY1(rsqrt, T(1) / lf_sqrt(a))",
       "LF_ANY1(rsqrt, T(1) / lf_sqrt(a))", LF_METHOD1(rsqrt)},
      {"sigmoid", 1, kFloating, kSame, kExpensive, nullptr,
       "LF_ANY1(sigmoid, T(1) / (T(1) + lf_exp(-a)))",
       "LF_ANY1(sigmoid, T(1) / (T(1) + lf_exp(-a)))", LF_METHOD1(sigmoid)},
      {"logical_not", 1, kBoolArgs, kBool, kCheap, nullptr, "LF_BOOL1(logical_not, !(a != 0))",
       "LF_BOOL1(logical_not, !(a != 0))", LF_METHOD1(logical_not)},
      {"isnan", 1, kAll, kBool, kCheap, nullptr, "LF_BOOL1(isnan, a != a)",
       "LF_BOOL1(isnan, a != a)", LF_METHOD1(isnan)},
      {"isinf", 1, kAll, kBool, kCheap, nullptr, R"LF(LF_BOOL1(isinf, false)
static inline bool lf_isinf(float a) { return __builtin_isinf(a); }
static inline bool lf_isinf(double a) { return __builtin_isinf(a); })LF",
       R"LF(LF_BOOL1(isinf, false)
LF_D bool lf_isinf(float a) { return fabsf(a) == __int_as_float(0x7f800000); }
LF_D bool lf_isinf(double a) { return fabs(a) == __longlong_as_double(0x7ff0000000000000LL); })LF",
       LF_METHOD1(isinf)},
      // A Float rounded to the nearest value of a Half (BFloat16) buffer, NaN kept: what a store
      // to and a load from such a buffer do.
      {"round_to_half", 1, kFloat, kSame, kCheap, nullptr,
       "static inline float lf_round_to_half(float f) { return lf_half_load(lf_half_store(f)); }",
       "LF_D float lf_round_to_half(float f) { return lf_h2f(lf_f2h(f)); }",
       [](const at::Tensor& a, const at::Tensor&) { return a.to(at::kHalf).to(at::kFloat); }},
      {"round_to_bfloat16", 1, kFloat, kSame, kCheap, nullptr,
       "static inline float lf_round_to_bfloat16(float f) { "
       "return lf_bf16_load(lf_bf16_store(f)); }",
       "LF_D float lf_round_to_bfloat16(float f) { return lf_bf16_load(lf_bf16_store(f)); }",
       [](const at::Tensor& a, const at::Tensor&) { return a.to(at::kBFloat16).to(at::kFloat); }},

      // Binary functions.
      {"add", 2, kAll, kSame, kCheap, nullptr, "LF_ANY2(add, a + b)",
       "LF_ANY2(add, (LF_W(T))a + (LF_W(T))b)", LF_METHOD2(add)},
      {"sub", 2, kNumeric, kSame, kCheap, nullptr, "LF_ANY2(sub, a - b)",
       "LF_ANY2(sub, (LF_W(T))a - (LF_W(T))b)", LF_METHOD2(sub)},
      {"mul", 2, kAll, kSame, kCheap, nullptr, "LF_ANY2(mul, a * b)",
       "LF_ANY2(mul, (LF_W(T))a * (LF_W(T))b)", LF_METHOD2(mul)},
      // True division. Integer division and remainder are no kernel functions: eager raises on a
      // zero divisor, so those ops run as ATen calls.
      {"div", 2, kFloating, kSame, kCheap, nullptr, "LF_ANY2(div, a / b)", "LF_ANY2(div, a / b)",
       LF_METHOD2(div)},
      // A division by a Scalar (div's by a Python number or CPU scalar, mean's by its count)
      // divides on the CPU as eager's CPU div does, and multiplies by the reciprocal on CUDA as
      // eager's CUDA div and mean do. The reference is the CPU's.
      {"div_by_scalar", 2, kFloating, kSame, kCheap, nullptr, "LF_ANY2(div_by_scalar, a / b)",
       R"LF(template <class T> LF_D T lf_div_by_scalar(T a, T b) { return a / b; }
LF_D float lf_div_by_scalar(float a, float b) { return a * (1.0f / b); }
LF_D double lf_div_by_scalar(double a, double b) { return a * (1.0 / b); })LF",
       LF_METHOD2(div)},
      // A floating pow whose exponent is the same for the whole loop renders as lf_pow_uniform,
      // with ATen's pow_tensor_scalar shortcuts (Note [CPU prelude], Note [CUDA prelude]).
      {"pow", 2, kNumeric, kSame, kExpensive, nullptr,
       R"LF(template <class T> static inline T lf_pow(T a, T b) {
  if (b < 0) return a == 1 ? T(1) : (a == -1 ? (T)((b & 1) ? -1 : 1) : T(0));
  lf_i64 r = 1, x = a, e = b;
  for (; e != 0; e >>= 1, x *= x) {
    if (e & 1) r *= x;
  }
  return (T)r;
}
LF_DECLARE2(LF_SIMD1, pow) LF_FLOAT2(pow, pow)
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
LF_POW_UNIFORM(float, powf, sqrtf) LF_POW_UNIFORM(double, pow, sqrt))LF",
       R"LF(LF_FLOAT2(pow, pow)
template <class T> LF_D T lf_pow(T a, T b) {
  if (b < 0) return a == 1 ? T(1) : (a == -1 ? (T)((b & 1) ? -1 : 1) : T(0));
  unsigned long long r = 1, x = (unsigned long long)(lf_i64)a;
  for (lf_i64 e = b; e != 0; e >>= 1, x *= x) {
    if (e & 1) r *= x;
  }
  return (T)(lf_i64)r;
}
#define LF_POW_UNIFORM(T, pw, root) \
  LF_D T lf_pow_uniform(T a, T b) { \
    if (b == (T)2) return a * a; \
    if (b == (T)3) return a * a * a; \
    if (b == (T)0.5) return root(a); \
    if (b == (T)-0.5) return (T)1 / root(a); \
    if (b == (T)-1) return (T)1 / a; \
    if (b == (T)-2) return (T)1 / (a * a); \
    return pw(a, b); \
  }
LF_POW_UNIFORM(float, powf, sqrtf) LF_POW_UNIFORM(double, pow, sqrt))LF",
       LF_METHOD2(pow)},
      {"atan2", 2, kFloating, kSame, kExpensive, nullptr,
       "LF_DECLARE2(LF_SIMD2, atan2) LF_FLOAT2(atan2, atan2)", "LF_FLOAT2(atan2, atan2)",
       LF_METHOD2(atan2)},
      // fmod must be exact.
      {"fmod", 2, kFloating, kSame, kExpensive,
       "no vector fmod in libmvec; the result must be exact",
       "LF_DECLARE2(, fmod) LF_FLOAT2(fmod, fmod)", "LF_FLOAT2(fmod, fmod)", LF_METHOD2(fmod)},
      {"remainder", 2, kFloating, kSame, kExpensive, "fmod plus a sign correction; see fmod",
       R"LF(static inline float lf_remainder(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
static inline double lf_remainder(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
})LF",
       R"LF(LF_D float lf_remainder(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
LF_D double lf_remainder(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
})LF",
       LF_METHOD2(remainder)},
      // The CPU chooses with lf_select, which GCC vectorizes next to a libmvec call.
      {"maximum", 2, kAll, kSame, kCheap, nullptr,
       "LF_ANY2(maximum, lf_select(a != a, a, lf_select(b != b, b, lf_select(a < b, b, a))))",
       "LF_ANY2(maximum, a != a ? a : (b != b ? b : (a < b ? b : a)))", LF_METHOD2(maximum)},
      {"minimum", 2, kAll, kSame, kCheap, nullptr,
       "LF_ANY2(minimum, lf_select(a != a, a, lf_select(b != b, b, lf_select(b < a, b, a))))",
       "LF_ANY2(minimum, a != a ? a : (b != b ? b : (b < a ? b : a)))", LF_METHOD2(minimum)},
      LF_COMPARISON(eq, ==),
      LF_COMPARISON(ne, !=),
      LF_COMPARISON(lt, <),
      LF_COMPARISON(le, <=),
      LF_COMPARISON(gt, >),
      LF_COMPARISON(ge, >=),
      // On the CPU with & and |, not && and ||: a short circuit is a branch around the second
      // load, which kept a loop reading a tiled, transposed input (Note [Tiled loops]) scalar.
      {"logical_and", 2, kBoolArgs, kBool, kCheap, nullptr,
       "LF_BOOL2(logical_and, (a != 0) & (b != 0))", "LF_BOOL2(logical_and, (a != 0) && (b != 0))",
       LF_METHOD2(logical_and)},
      {"logical_or", 2, kBoolArgs, kBool, kCheap, nullptr,
       "LF_BOOL2(logical_or, (a != 0) | (b != 0))", "LF_BOOL2(logical_or, (a != 0) || (b != 0))",
       LF_METHOD2(logical_or)},
      {"logical_xor", 2, kBoolArgs, kBool, kCheap, nullptr,
       "LF_BOOL2(logical_xor, (a != 0) != (b != 0))", "LF_BOOL2(logical_xor, (a != 0) != (b != 0))",
       LF_METHOD2(logical_xor)},
      {"bitwise_and", 2, kIntegral, kSame, kCheap, nullptr, "LF_ANY2(bitwise_and, a & b)",
       "LF_ANY2(bitwise_and, a & b)", LF_METHOD2(bitwise_and)},
      {"bitwise_or", 2, kIntegral, kSame, kCheap, nullptr, "LF_ANY2(bitwise_or, a | b)",
       "LF_ANY2(bitwise_or, a | b)", LF_METHOD2(bitwise_or)},
      {"bitwise_xor", 2, kIntegral, kSame, kCheap, nullptr, "LF_ANY2(bitwise_xor, a ^ b)",
       "LF_ANY2(bitwise_xor, a ^ b)", LF_METHOD2(bitwise_xor)},
      {"copysign", 2, kFloating, kSame, kCheap, nullptr,
       "LF_DECLARE2(, copysign) LF_FLOAT2(copysign, copysign)", "LF_FLOAT2(copysign, copysign)",
       LF_METHOD2(copysign)},
      {"hypot", 2, kFloating, kSame, kExpensive, nullptr,
       "LF_DECLARE2(LF_SIMD2, hypot) LF_FLOAT2(hypot, hypot)", "LF_FLOAT2(hypot, hypot)",
       LF_METHOD2(hypot)},
  };
}

#undef LF_METHOD1
#undef LF_METHOD2
#undef LF_MATH1
#undef LF_COMPARISON

}  // namespace

const std::vector<KernelFunction>& kernelFunctions() {
  static const std::vector<KernelFunction> kTable = tableRows();
  return kTable;
}

const KernelFunction* findKernelFunction(const std::string& fn) {
  static const std::unordered_map<std::string_view, const KernelFunction*> kByName = [] {
    std::unordered_map<std::string_view, const KernelFunction*> by_name;
    for (const KernelFunction& row : kernelFunctions()) {
      LF_INTERNAL_ASSERT(row.arity == 1 || row.arity == 2, "kernel function ", row.name,
                         " of arity ", row.arity);
      LF_INTERNAL_ASSERT(by_name.emplace(row.name, &row).second, "kernel function ", row.name,
                         " twice in the table");
    }
    return by_name;
  }();
  auto it = kByName.find(fn);
  return it == kByName.end() ? nullptr : it->second;
}

bool fnAcceptsType(FnArgs args, c10::ScalarType dtype) {
  const bool floating = dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Double;
  const bool boolean = dtype == c10::ScalarType::Bool;
  switch (args) {
    case FnArgs::kFloating: return floating;
    case FnArgs::kFloat: return dtype == c10::ScalarType::Float;
    case FnArgs::kNumeric: return !boolean;
    case FnArgs::kIntegral: return !floating;
    case FnArgs::kBool: return boolean;
    case FnArgs::kAll: return true;
  }
  return false;
}

}  // namespace lazyfuse

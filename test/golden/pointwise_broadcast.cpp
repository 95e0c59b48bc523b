// codegen version 1
// lazyfuse CPU kernels
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
LF_DECLARE1(, sqrt) LF_DECLARE1(, floor) LF_DECLARE1(, ceil) LF_DECLARE1(, trunc)
LF_DECLARE1(, nearbyint) LF_DECLARE1(, fabs) LF_DECLARE1(, lgamma) LF_DECLARE2(, fmod)
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
static inline float lf_bf16_load(unsigned short h) {
  unsigned int u = (unsigned int)h << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
static inline unsigned short lf_bf16_store(float f) {
  unsigned int u;
  __builtin_memcpy(&u, &f, 4);
  unsigned int bias = ((u >> 16) & 1u) + 0x7FFFu;
  return f != f ? (unsigned short)0x7FC0 : (unsigned short)((u + bias) >> 16);
}
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
LF_FLOAT1(abs, fabs) LF_FLOAT1(floor, floor) LF_FLOAT1(ceil, ceil) LF_FLOAT1(round, nearbyint)
LF_FLOAT1(trunc, trunc)
static inline bool lf_bitwise_not(bool a) { return !a; }
LF_BOOL1(logical_not, !(a != 0)) LF_BOOL1(isnan, a != a) LF_BOOL1(isinf, false)
static inline bool lf_isinf(float a) { return __builtin_isinf(a); }
static inline bool lf_isinf(double a) { return __builtin_isinf(a); }
LF_ANY2(add, a + b) LF_ANY2(sub, a - b) LF_ANY2(mul, a * b) LF_ANY2(div, a / b)
LF_ANY2(maximum, a != a ? a : (b != b ? b : (a < b ? b : a)))
LF_ANY2(minimum, a != a ? a : (b != b ? b : (b < a ? b : a)))
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
static inline float lf_remainder(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
static inline double lf_remainder(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}

extern "C" void lf_kernel_0(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,
    const double* fparams) {
  const float* b0 = (const float*)buffers[0];
  const float* b1 = (const float*)buffers[1];
  const float* b2 = (const float*)buffers[2];
  float* b3 = (float*)buffers[3];
  for (lf_i64 p = begin; p < end;) {
    const lf_i64 lo = p % 8;
    const lf_i64 hi = lf_imin(8, lo + (end - p));
    const lf_i64 v0 = (p / 24);
    const lf_i64 v1 = (p / 8) % 3;
    const float t1 = (float)b1[v1];
    const lf_i64 t5 = (lf_i64)iparams[0];
    const float t6 = (float)t5;
    const lf_i64 t9 = (lf_i64)iparams[1];
    const float t10 = (float)t9;
    const float t11 = (float)lf_mul(t1, t10);
    const double t14 = (double)fparams[2];
    const float t15 = (float)t14;
#pragma omp simd
    for (lf_i64 v2 = lo; v2 < hi; ++v2) {
      const float t0 = (float)b0[(v0 * 8 + v2)];
      const float t2 = (float)lf_mul(t0, t1);
      const float t3 = (float)lf_sigmoid(t2);
      const float t4 = (float)b2[v2];
      const float t7 = (float)lf_mul(t4, t6);
      const float t8 = (float)lf_add(t3, t7);
      const float t12 = (float)lf_sub(t8, t11);
      const float t13 = (float)lf_tanh(t12);
      const float t16 = (float)lf_mul(t13, t15);
      b3[((v0 * 24 + v1 * 8) + v2)] = (float)t16;
    }
    p += hi - lo;
  }
}

#include "kernels/few_rows_matmul.h"

#include "lazy_ir/metrics.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstdint>
#include <optional>

namespace lazyfuse {

// Note [Matrix products of few rows]
// Decoding a token multiplies a few rows (the batch) by each weight matrix: a product bound by
// reading the weight once. ATen's BLAS (MKL) runs [4, 512] x [512, 1024] in 110-140 µs on the
// 2-core AMD EPYC we measure on (12-19 GB/s of weight), and the decoders of bench/models.py spend
// most of a token there. The plan runner hands such extern steps to the kernels below instead:
// float32 and bfloat16 CPU products (aten::mm, matmul, linear, addmm with beta = alpha = 1) of
// at most kFewRows rows (kFewRowsAlongK for linear's weight layout), whose other matrix has at
// least kMinOther elements (smaller ones stay with the BLAS). They read the other matrix once,
// keeping every row's sums in vector registers:
// - its rows contiguous (`x @ w`): one to four vectors of columns at a time, each sum vector
//   updated with a[m, k] * b[k, n:n+lanes] along k;
// - its columns contiguous (linear's weight, b = w.t()): two or four rows of w at a time, a
//   vector of partial dot products per pair of rows along k, its lanes added at the end.
// Both sum in runs along k (kRun, kColumnRun) whose totals add up: a sum along all of k erred up
// to 3x more than MKL's; in runs, 0.35-1.06x its error against float64 on the shapes tried.
// They are built twice: for AVX-512 (16-float vectors, up to 16 vectors of sums in its 32
// registers) and for AVX2 with FMA (8-float vectors, 12 sums in its 16 registers; more rows than
// fit run in groups, each reading the block's columns of b again from cache). The first AVX2 build
// (the AVX-512 code with two 8-float registers per vector) spilled its sums and ran 4-10x slower
// than MKL; with its own register blocking, on the AMD EPYC (Zen 3) we measure on, [4, 512] x
// [512, 1024] takes 64 µs against MKL's 163, and every shape tried (1-16 rows, both layouts) ran
// 1.2-4x faster than MKL (a lazy step's time less that of a step of one small kernel), but one
// row against a large matrix along n, which stays with MKL (kMaxOneRowAlongN). Without
// either extension the BLAS keeps these products. Columns are split across torch's threads (one
// on the worker of Note [Asynchronous steps]). The sums run in another order than the BLAS's:
// results agree with eager's within float32 rounding, not bit for bit. Counted by
// FewRowsMatmuls; pinned by test_few_rows_matmul.py.
// bfloat16 elements are widened to float as they are read (a shift of their 16 bits), summed
// in float, the bias added in float, and the result rounded to bfloat16 once, as eager's BLAS
// does; their errors against float64 came out equal to eager's on every shape tried (both are
// the final rounding). On the Zen 3 EPYC, bf16 [4, 1024] x [1024, 1024] runs in 210-250 µs as
// a lazy step against eager's 410-470 for F.linear, and in 190-200 µs for `x @ w` of a [k, n]
// weight, which eager's CPU path for bfloat16 takes 8.4-8.8 ms over.

namespace {

/// Rows at most: 16 when the vector loops run along n (x @ w: [16, 512] x [512, 1024] 97 µs
/// against MKL's 183), 12 along k (linear: [16, 256] x [256, 1024] was no faster than MKL).
constexpr int64_t kFewRows = 16;
constexpr int64_t kFewRowsAlongK = 12;
constexpr int64_t kMinOther = 16384;
constexpr int64_t kMaxOneRowAlongN = int64_t{1} << 21;

/// A vector of 16 floats (one AVX-512 register) or of 8 (one AVX2 register).
typedef float Vec16 __attribute__((vector_size(16 * sizeof(float))));
typedef float Vec8 __attribute__((vector_size(8 * sizeof(float))));

template <typename Vec>
constexpr int kLanes = sizeof(Vec) / sizeof(float);

/// The vector at `p`, read unaligned. (A std::memcpy into the vector was copied to the stack in
/// 16-byte pieces and read back whole: a stalled load per vector.)
template <typename Vec>
__attribute__((always_inline)) inline void load(Vec& out, const float* p) {
  typedef Vec Unaligned __attribute__((aligned(alignof(float)), may_alias));
  out = *reinterpret_cast<const Unaligned*>(p);
}

/// The vector of floats the bfloat16 values at `p` stand for: each widened and shifted up.
typedef uint16_t Halves8 __attribute__((vector_size(8 * sizeof(uint16_t))));
typedef uint16_t Halves16 __attribute__((vector_size(16 * sizeof(uint16_t))));
typedef Halves8 UnalignedHalves8 __attribute__((aligned(alignof(uint16_t)), may_alias));
typedef Halves16 UnalignedHalves16 __attribute__((aligned(alignof(uint16_t)), may_alias));
typedef uint32_t Words8 __attribute__((vector_size(8 * sizeof(uint32_t))));
typedef uint32_t Words16 __attribute__((vector_size(16 * sizeof(uint32_t))));

__attribute__((always_inline)) inline void load(Vec8& out, const c10::BFloat16* p) {
  const Halves8 halves = *reinterpret_cast<const UnalignedHalves8*>(p);
  out = (Vec8)(__builtin_convertvector(halves, Words8) << 16);
}
__attribute__((always_inline)) inline void load(Vec16& out, const c10::BFloat16* p) {
  const Halves16 halves = *reinterpret_cast<const UnalignedHalves16*>(p);
  out = (Vec16)(__builtin_convertvector(halves, Words16) << 16);
}

/// One element as a float (c10::BFloat16's own conversion: the same shift).
template <typename E>
__attribute__((always_inline)) inline float value(const E* p) {
  return static_cast<float>(*p);
}

/// The vectors of sums a block keeps in registers: 16 of AVX-512's 32, 12 of AVX2's 16 (the
/// others hold the loaded vectors and the broadcast row value).
template <typename Vec>
constexpr int kSums = kLanes<Vec> == 16 ? 16 : 12;

/// Vectors of columns a block of M rows takes along n, and the rows it takes at a time (a block of
/// 16 rows on AVX2 runs as groups of 6, each reading the block's columns of b again, from cache).
template <typename Vec, int M>
constexpr int kColumnVectors = 4 * M <= kSums<Vec>                         ? 4
                               : (2 * M <= kSums<Vec> || kLanes<Vec> == 8) ? 2
                                                                           : 1;
template <typename Vec, int V>
constexpr int kRowGroup = kSums<Vec> / V;

/// c[m, n] = sum_k a[m, k] * b[k, n] (+ bias[n]) for M rows, with b[k, n] at
/// b + k * b_k + n * b_n (one of b_k, b_n is 1); a and b of float or bfloat16 elements (E), the
/// sums, bias and c in float.
template <typename E>
struct Product {
  const E* a;
  int64_t lda;
  const E* b;
  int64_t b_k, b_n;
  const float* bias;  // or null
  float* c;           // M rows of N, contiguous
  int64_t M, K, N;
  bool along_n;  // the vector loops run along n (b's rows contiguous), else along k
};

/// Sums run along at most this many k at a time, and their totals add up the runs: the error of a
/// long sum grows with its length, and this is what keeps it at the BLAS's (a sum along all of k
/// erred up to 3x more than MKL's on [4, 512] x [512, 1024]).
constexpr int64_t kRun = 64;

/// Rows of b the blocks of columns take at a time, along n: a whole number of runs.
constexpr int64_t kRowsAtOnce = 4 * kRun;

/// The dot products' runs: 16 products a lane.
template <typename Vec>
constexpr int64_t kColumnRun = kRun / 4 * kLanes<Vec>;

/// `*total = sum` at the first run of k, `*total += sum` after it.
template <typename Vec>
__attribute__((always_inline)) inline void addRun(float* total, const Vec& sum, bool first) {
  typedef Vec Unaligned __attribute__((aligned(alignof(float)), may_alias));
  Unaligned* out = reinterpret_cast<Unaligned*>(total);
  *out = first ? sum : *out + sum;
}

/// Columns [n, n + lanes * V) of rows [m0, m0 + M), b's rows contiguous: each row's sums in V
/// vectors.
template <typename Vec, int M, int V, typename P>
__attribute__((always_inline)) inline void rowsBlock(const P& p, int64_t n, int64_t m0,
                                                     int64_t k_begin, int64_t k_end) {
  constexpr int L = kLanes<Vec>;
  const auto* a = p.a + m0 * p.lda;
  float* c = p.c + m0 * p.N + n;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kRun) {
    Vec sums[M][V] = {};
    const int64_t k1 = std::min(p.K, k0 + kRun);
    for (int64_t k = k0; k < k1; ++k) {
      const auto* row = p.b + k * p.b_k + n;
      Vec b[V];
      for (int v = 0; v < V; ++v) load(b[v], row + L * v);
      for (int m = 0; m < M; ++m) {
        const float x = value(a + m * p.lda + k);
        for (int v = 0; v < V; ++v) sums[m][v] += x * b[v];
      }
    }
    for (int m = 0; m < M; ++m) {
      for (int v = 0; v < V; ++v) addRun(c + m * p.N + L * v, sums[m][v], k0 == 0);
    }
  }
  if (p.bias == nullptr || k_end < p.K) return;
  for (int m = 0; m < M; ++m) {
    for (int v = 0; v < V; ++v) {
      Vec bias;
      load(bias, p.bias + n + L * v);
      addRun(c + m * p.N + L * v, bias, false);
    }
  }
}

/// rowsBlock over rows [m0, m0 + M), kRowGroup of them at a time.
template <typename Vec, int M, int V, typename P>
__attribute__((always_inline)) inline void rowGroups(const P& p, int64_t n, int64_t m0,
                                                     int64_t k_begin, int64_t k_end) {
  constexpr int G = kRowGroup<Vec, V>;
  if constexpr (M > G) {
    rowsBlock<Vec, G, V>(p, n, m0, k_begin, k_end);
    rowGroups<Vec, M - G, V>(p, n, m0 + G, k_begin, k_end);
  } else {
    rowsBlock<Vec, M, V>(p, n, m0, k_begin, k_end);
  }
}

/// Columns [n, n + W) of every row, b's columns contiguous: dot products along k, a vector of
/// partial sums per row and column, whose lanes are added at the end.
template <typename Vec, int M, int W, typename P>
__attribute__((always_inline)) inline void columnsBlock(const P& p, int64_t n) {
  constexpr int L = kLanes<Vec>;
  float totals[M][W][L];
  const int64_t vector_k = p.K / L * L;
  for (int64_t k0 = 0; k0 < vector_k; k0 += kColumnRun<Vec>) {
    Vec sums[M][W] = {};
    const int64_t k1 = std::min(vector_k, k0 + kColumnRun<Vec>);
    for (int64_t k = k0; k < k1; k += L) {
      Vec b[W];
      for (int w = 0; w < W; ++w) load(b[w], p.b + (n + w) * p.b_n + k);
      for (int m = 0; m < M; ++m) {
        Vec a;
        load(a, p.a + m * p.lda + k);
        for (int w = 0; w < W; ++w) sums[m][w] += a * b[w];
      }
    }
    for (int m = 0; m < M; ++m) {
      for (int w = 0; w < W; ++w) addRun(totals[m][w], sums[m][w], k0 == 0);
    }
  }
  for (int m = 0; m < M; ++m) {
    for (int w = 0; w < W; ++w) {
      float sum = 0;
      if (vector_k > 0) {
        for (int lane = 0; lane < L; ++lane) sum += totals[m][w][lane];
      }
      for (int64_t k = vector_k; k < p.K; ++k) {
        sum += value(p.a + m * p.lda + k) * value(p.b + (n + w) * p.b_n + k);
      }
      p.c[m * p.N + n + w] = p.bias != nullptr ? sum + p.bias[n + w] : sum;
    }
  }
}

/// Columns [n0, n1) of every row, one at a time (the tails the blocks leave), in runs of k.
template <typename P>
inline void singleColumns(const P& p, int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t n = n0; n < n1; ++n) {
      float sum = 0;
      for (int64_t k0 = 0; k0 < p.K; k0 += kRun) {
        float run = 0;
        for (int64_t k = k0; k < std::min(p.K, k0 + kRun); ++k) {
          run += value(p.a + m * p.lda + k) * value(p.b + k * p.b_k + n * p.b_n);
        }
        sum += run;
      }
      p.c[m * p.N + n] = p.bias != nullptr ? sum + p.bias[n] : sum;
    }
  }
}

template <typename Vec, int M, typename P>
__attribute__((always_inline)) inline void columns(const P& p, int64_t n0, int64_t n1) {
  constexpr int L = kLanes<Vec>;
  int64_t n = n0;
  if (p.along_n) {
    // Each row of b is a page or more apart when n is large: the blocks of columns take
    // kRowsAtOnce rows of b at a time, or a pass down all of k touched more pages than the TLB
    // holds ([1, 4096] x [4096, 1024] ran 1.2x slower than MKL, now faster).
    constexpr int V = kColumnVectors<Vec, M>;
    for (int64_t k = 0; k < p.K; k += kRowsAtOnce) {
      const int64_t k_end = std::min(p.K, k + kRowsAtOnce);
      n = n0;
      for (; n + V * L <= n1; n += V * L) rowGroups<Vec, M, V>(p, n, 0, k, k_end);
      for (; n + L <= n1; n += L) rowGroups<Vec, M, 1>(p, n, 0, k, k_end);
    }
  } else {
    // M * W sums: at most 16 with AVX-512 (M <= 12), 12 with AVX2.
    constexpr int W = 4 * M <= kSums<Vec> ? 4 : 2 * M <= kSums<Vec> ? 2 : 1;
    for (; n + W <= n1; n += W) columnsBlock<Vec, M, W>(p, n);
  }
  singleColumns(p, n, n1);
}

template <typename Vec, typename P>
__attribute__((always_inline)) inline void columnsOfRows(const P& p, int64_t n0, int64_t n1) {
  switch (p.M) {
    case 1: return columns<Vec, 1>(p, n0, n1);
    case 2: return columns<Vec, 2>(p, n0, n1);
    case 3: return columns<Vec, 3>(p, n0, n1);
    case 4: return columns<Vec, 4>(p, n0, n1);
    case 5: return columns<Vec, 5>(p, n0, n1);
    case 6: return columns<Vec, 6>(p, n0, n1);
    case 7: return columns<Vec, 7>(p, n0, n1);
    case 8: return columns<Vec, 8>(p, n0, n1);
    case 9: return columns<Vec, 9>(p, n0, n1);
    case 10: return columns<Vec, 10>(p, n0, n1);
    case 11: return columns<Vec, 11>(p, n0, n1);
    case 12: return columns<Vec, 12>(p, n0, n1);
    case 13: return columns<Vec, 13>(p, n0, n1);
    case 14: return columns<Vec, 14>(p, n0, n1);
    case 15: return columns<Vec, 15>(p, n0, n1);
    default: return columns<Vec, 16>(p, n0, n1);
  }
}

#if defined(__x86_64__)
template <typename E>
__attribute__((target("avx512f"))) void productColumnsAvx512(const Product<E>& p, int64_t n0,
                                                             int64_t n1) {
  columnsOfRows<Vec16>(p, n0, n1);
}

template <typename E>
__attribute__((target("avx2,fma"))) void productColumnsAvx2(const Product<E>& p, int64_t n0,
                                                            int64_t n1) {
  columnsOfRows<Vec8>(p, n0, n1);
}
#endif

/// The columns of the products this CPU runs: null without AVX2 and FMA.
template <typename E>
using ColumnsFn = void (*)(const Product<E>&, int64_t, int64_t);

template <typename E>
ColumnsFn<E> productColumns() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return productColumnsAvx512<E>;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return productColumnsAvx2<E>;
  }
#endif
  return nullptr;
}

/// A strided CPU tensor of `dtype`.
bool isCpu(const at::Tensor& t, at::ScalarType dtype) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() &&
         t.scalar_type() == dtype;
}

bool isOne(const c10::IValue& scalar) { return scalar.isScalar() && scalar.toScalar().equal(1); }

/// What runFewRowsMatmul computes: rows of `a` times `b` (its [K, N] view) plus `bias`.
struct Call {
  at::Tensor a, b, bias;
  std::vector<int64_t> out_sizes;
  bool along_n = false;
};

c10::OperatorHandle atenOp(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

/// The call of `op` over `stack`, when its kernel here computes it.
std::optional<Call> fewRowsCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  // Found once: an extern call compares pointers, not names.
  static const c10::OperatorHandle mm = atenOp("aten::mm"), matmul = atenOp("aten::matmul"),
                                   linear = atenOp("aten::linear"), addmm = atenOp("aten::addmm");
  Call call;
  if (op == mm && stack.size() == 2) {
    call.a = stack[0].toTensor();
    call.b = stack[1].toTensor();
    if (call.a.dim() != 2 || call.b.dim() != 2) return std::nullopt;
  } else if (op == matmul && stack.size() == 2) {
    call.a = stack[0].toTensor();
    call.b = stack[1].toTensor();
    if (call.a.dim() < 2 || call.b.dim() != 2) return std::nullopt;
  } else if (op == linear && stack.size() == 3) {
    call.a = stack[0].toTensor();
    const at::Tensor& weight = stack[1].toTensor();
    if (call.a.dim() < 2 || weight.dim() != 2) return std::nullopt;
    call.b = weight.t();
    if (!stack[2].isNone()) call.bias = stack[2].toTensor();
  } else if (op == addmm && stack.size() == 5) {
    if (!isOne(stack[3]) || !isOne(stack[4])) return std::nullopt;
    call.bias = stack[0].toTensor();
    call.a = stack[1].toTensor();
    call.b = stack[2].toTensor();
    if (call.a.dim() != 2 || call.b.dim() != 2) return std::nullopt;
  } else {
    return std::nullopt;
  }
  // float32 or bfloat16, both matrices (and the bias) of one dtype, as eager requires.
  const at::ScalarType dtype = call.a.scalar_type();
  if (dtype != at::kFloat && dtype != at::kBFloat16) return std::nullopt;
  if (!isCpu(call.a, dtype) || !isCpu(call.b, dtype)) return std::nullopt;
  const int64_t K = call.a.size(-1), N = call.b.size(1);
  if (call.b.size(0) != K || K * N < kMinOther) return std::nullopt;
  // The vector loops run along n (b's rows contiguous) or k (its columns contiguous): at least
  // a vector of it, or the product is mostly tails.
  const bool along_n = call.b.stride(1) == 1 && N >= kLanes<Vec16>;
  const bool along_k = call.b.stride(0) == 1 && K >= kLanes<Vec16>;
  if (!along_n && !along_k) return std::nullopt;
  call.along_n = along_n;
  if (call.bias.defined() && (!isCpu(call.bias, dtype) || call.bias.dim() != 1 ||
                              call.bias.size(0) != N || call.bias.stride(0) != 1)) {
    return std::nullopt;
  }
  // Rows of `a`: a [M, K] matrix whose rows are contiguous; more dimensions only when contiguous.
  if (call.a.stride(-1) != 1 && K > 1) return std::nullopt;
  if (call.a.dim() > 2 && !call.a.is_contiguous()) return std::nullopt;
  const int64_t M = call.a.numel() / K;
  if (M < 1 || M > (call.along_n ? kFewRows : kFewRowsAlongK)) return std::nullopt;
  // One float32 row against a large matrix along n: MKL's gemv streams b's rows, where the
  // blocks of columns read each row a piece at a time ([1, 1024] x [1024, 4096] took 612 µs
  // against its 432 on the Zen 3 EPYC). bfloat16 stays here: eager's BLAS path is slower still.
  if (dtype == at::kFloat && call.along_n && M == 1 && K * N > kMaxOneRowAlongN) {
    return std::nullopt;
  }
  call.out_sizes = call.a.sizes().vec();
  call.out_sizes.back() = N;
  return call;
}

}  // namespace

namespace {

/// Runs `call` with E (float or c10::BFloat16) elements: the sums in float, written to `out`
/// (float32), the bias added in float.
template <typename E>
bool runProduct(const Call& call, const at::Tensor& bias, at::Tensor& out) {
  static const ColumnsFn<E> product_columns = productColumns<E>();
  if (product_columns == nullptr) return false;
  const int64_t K = call.a.size(-1), N = call.b.size(1);
  Product<E> p{static_cast<const E*>(call.a.const_data_ptr()),
               call.a.dim() > 2 ? K : call.a.stride(0),
               static_cast<const E*>(call.b.const_data_ptr()),
               call.b.stride(0),
               call.b.stride(1),
               bias.defined() ? bias.const_data_ptr<float>() : nullptr,
               out.mutable_data_ptr<float>(),
               call.a.numel() / K,
               K,
               N,
               call.along_n};
  // Blocks of 64 columns, each thread's share a whole number of them.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, 4, [&](int64_t begin, int64_t end) {
    product_columns(p, begin * kBlock, std::min(end * kBlock, N));
  });
  return true;
}

}  // namespace

bool runFewRowsMatmul(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  // Whether this CPU runs either build: asked once, as runProduct's choice of build is.
  static const bool available = productColumns<float>() != nullptr;
  if (!available) return false;
  std::optional<Call> call = fewRowsCall(op, stack);
  if (!call) return false;
  static Counter& counter = counterNamed("FewRowsMatmuls");
  counter.add();
  at::Tensor out;
  if (call->a.scalar_type() == at::kFloat) {
    out = at::empty(call->out_sizes, call->a.options());
    runProduct<float>(*call, call->bias, out);
  } else {
    // bfloat16: float sums rounded once at the end, the bias added in float before, as eager's
    // BLAS does.
    at::Tensor sums = at::empty(call->out_sizes, call->a.options().dtype(at::kFloat));
    const at::Tensor bias = call->bias.defined() ? call->bias.to(at::kFloat) : at::Tensor();
    runProduct<c10::BFloat16>(*call, bias, sums);
    out = sums.to(at::kBFloat16);
  }
  stack.clear();
  stack.emplace_back(std::move(out));
  return true;
}

}  // namespace lazyfuse

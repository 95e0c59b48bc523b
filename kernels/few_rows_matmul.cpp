#include "kernels/few_rows_matmul.h"

#include "lazy_ir/metrics.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

namespace lazyfuse {

// Note [Matrix products of few rows]
// Decoding a token multiplies a few rows (the batch) by each weight matrix: a product bound by
// reading the weight once. ATen's BLAS (MKL) runs [4, 512] x [512, 1024] in 110-140 µs on the
// 2-core AMD EPYC we measure on (12-19 GB/s of weight), and the decoders of bench/models.py spend
// most of a token there. The plan runner hands such extern steps to the kernels below instead:
// float32 CPU products (aten::mm, matmul, linear, addmm with beta = alpha = 1) of at most
// kFewRows rows (kFewRowsAlongK for linear's weight layout), whose other matrix has at least
// kMinOther elements (smaller ones stay with the BLAS). They read the other matrix once, keeping
// every row's sums in vector registers:
// - its rows contiguous (`x @ w`): 64 columns at a time, each sum vector updated with
//   a[m, k] * b[k, n:n+64] along k;
// - its columns contiguous (linear's weight, b = w.t()): two or four rows of w at a time, a
//   vector of partial dot products per pair of rows along k, its lanes added at the end.
// Both sum in runs along k (kRun, kColumnRun) whose totals add up: a sum along all of k erred up
// to 3x more than MKL's; in runs, 0.35-1.06x its error against float64 on the shapes tried.
// They are built for AVX-512 and run where the CPU has it: the same code built for AVX2 (two
// 8-float registers per vector) ran 4-10x slower than MKL on [4, 512] x [512, 1024], so without
// AVX-512 the BLAS keeps these products. Columns are split across torch's threads (one on the
// worker of Note [Asynchronous steps]). The sums run in another order than the BLAS's: results
// agree with eager's within float32 rounding, not bit for bit. Counted by FewRowsMatmuls; pinned by
// test_few_rows_matmul.py.

namespace {

/// Rows at most: 16 when the vector loops run along n (x @ w: [16, 512] x [512, 1024] 97 µs
/// against MKL's 183), 12 along k (linear: [16, 256] x [256, 1024] was no faster than MKL).
constexpr int64_t kFewRows = 16;
constexpr int64_t kFewRowsAlongK = 12;
constexpr int64_t kMinOther = 16384;

constexpr int kLanes = 16;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

/// c[m, n] = sum_k a[m, k] * b[k, n] (+ bias[n]) for M rows, with b[k, n] at
/// b + k * b_k + n * b_n (one of b_k, b_n is 1).
struct Product {
  const float* a;
  int64_t lda;
  const float* b;
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

/// The dot products' runs: 16 products a lane (256 along k).
constexpr int64_t kColumnRun = kRun / 4 * kLanes;

/// `*total = sum` at the first run of k, `*total += sum` after it.
__attribute__((always_inline)) inline void addRun(float* total, const Vec& sum, bool first) {
  Vec out = sum;
  if (!first) {
    Vec before;
    std::memcpy(&before, total, sizeof(Vec));
    out += before;
  }
  std::memcpy(total, &out, sizeof(Vec));
}

/// Columns [n, n + 16 * V) of every row, b's rows contiguous: each row's sums in V vectors.
template <int M, int V>
__attribute__((always_inline)) inline void rowsBlock(const Product& p, int64_t n) {
  for (int64_t k0 = 0; k0 < p.K; k0 += kRun) {
    Vec sums[M][V] = {};
    const int64_t k1 = std::min(p.K, k0 + kRun);
    for (int64_t k = k0; k < k1; ++k) {
      const float* row = p.b + k * p.b_k + n;
      Vec b[V];
      for (int v = 0; v < V; ++v) std::memcpy(&b[v], row + kLanes * v, sizeof(Vec));
      for (int m = 0; m < M; ++m) {
        const float a = p.a[m * p.lda + k];
        for (int v = 0; v < V; ++v) sums[m][v] += a * b[v];
      }
    }
    for (int m = 0; m < M; ++m) {
      for (int v = 0; v < V; ++v) addRun(p.c + m * p.N + n + kLanes * v, sums[m][v], k0 == 0);
    }
  }
  if (p.bias == nullptr) return;
  for (int m = 0; m < M; ++m) {
    for (int v = 0; v < V; ++v) {
      Vec bias;
      std::memcpy(&bias, p.bias + n + kLanes * v, sizeof(Vec));
      addRun(p.c + m * p.N + n + kLanes * v, bias, false);
    }
  }
}

/// Columns [n, n + W) of every row, b's columns contiguous: dot products along k, a vector of
/// partial sums per row and column, whose lanes are added at the end.
template <int M, int W>
__attribute__((always_inline)) inline void columnsBlock(const Product& p, int64_t n) {
  float totals[M][W][kLanes];
  const int64_t vector_k = p.K / kLanes * kLanes;
  for (int64_t k0 = 0; k0 < vector_k; k0 += kColumnRun) {
    Vec sums[M][W] = {};
    const int64_t k1 = std::min(vector_k, k0 + kColumnRun);
    for (int64_t k = k0; k < k1; k += kLanes) {
      Vec b[W];
      for (int w = 0; w < W; ++w) std::memcpy(&b[w], p.b + (n + w) * p.b_n + k, sizeof(Vec));
      for (int m = 0; m < M; ++m) {
        Vec a;
        std::memcpy(&a, p.a + m * p.lda + k, sizeof(Vec));
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
        for (int lane = 0; lane < kLanes; ++lane) sum += totals[m][w][lane];
      }
      for (int64_t k = vector_k; k < p.K; ++k) {
        sum += p.a[m * p.lda + k] * p.b[(n + w) * p.b_n + k];
      }
      p.c[m * p.N + n + w] = p.bias != nullptr ? sum + p.bias[n + w] : sum;
    }
  }
}

/// Columns [n0, n1) of every row, one at a time (the tails the blocks leave), in runs of k.
inline void singleColumns(const Product& p, int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t n = n0; n < n1; ++n) {
      float sum = 0;
      for (int64_t k0 = 0; k0 < p.K; k0 += kRun) {
        float run = 0;
        for (int64_t k = k0; k < std::min(p.K, k0 + kRun); ++k) {
          run += p.a[m * p.lda + k] * p.b[k * p.b_k + n * p.b_n];
        }
        sum += run;
      }
      p.c[m * p.N + n] = p.bias != nullptr ? sum + p.bias[n] : sum;
    }
  }
}

template <int M>
__attribute__((always_inline)) inline void columns(const Product& p, int64_t n0, int64_t n1) {
  int64_t n = n0;
  if (p.along_n) {
    constexpr int V = M <= 4 ? 4 : M <= 8 ? 2 : 1;  // at most 16 vectors of sums
    for (; n + V * kLanes <= n1; n += V * kLanes) rowsBlock<M, V>(p, n);
    for (; n + kLanes <= n1; n += kLanes) rowsBlock<M, 1>(p, n);
  } else {
    constexpr int W = M <= 4 ? 4 : M <= 8 ? 2 : 1;
    for (; n + W <= n1; n += W) columnsBlock<M, W>(p, n);
  }
  singleColumns(p, n, n1);
}

#if defined(__x86_64__)
__attribute__((target("avx512f")))
#endif
void productColumns(
    const Product& p, int64_t n0, int64_t n1) {
  switch (p.M) {
    case 1: return columns<1>(p, n0, n1);
    case 2: return columns<2>(p, n0, n1);
    case 3: return columns<3>(p, n0, n1);
    case 4: return columns<4>(p, n0, n1);
    case 5: return columns<5>(p, n0, n1);
    case 6: return columns<6>(p, n0, n1);
    case 7: return columns<7>(p, n0, n1);
    case 8: return columns<8>(p, n0, n1);
    case 9: return columns<9>(p, n0, n1);
    case 10: return columns<10>(p, n0, n1);
    case 11: return columns<11>(p, n0, n1);
    case 12: return columns<12>(p, n0, n1);
    case 13: return columns<13>(p, n0, n1);
    case 14: return columns<14>(p, n0, n1);
    case 15: return columns<15>(p, n0, n1);
    default: return columns<16>(p, n0, n1);
  }
}

bool isFloatOnCpu(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() &&
         t.scalar_type() == at::kFloat;
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
  if (!isFloatOnCpu(call.a) || !isFloatOnCpu(call.b)) return std::nullopt;
  const int64_t K = call.a.size(-1), N = call.b.size(1);
  if (call.b.size(0) != K || K * N < kMinOther) return std::nullopt;
  // The vector loops run along n (b's rows contiguous) or k (its columns contiguous): at least
  // a vector of it, or the product is mostly tails.
  const bool along_n = call.b.stride(1) == 1 && N >= kLanes;
  const bool along_k = call.b.stride(0) == 1 && K >= kLanes;
  if (!along_n && !along_k) return std::nullopt;
  call.along_n = along_n;
  if (call.bias.defined() && (!isFloatOnCpu(call.bias) || call.bias.dim() != 1 ||
                              call.bias.size(0) != N || call.bias.stride(0) != 1)) {
    return std::nullopt;
  }
  // Rows of `a`: a [M, K] matrix whose rows are contiguous; more dimensions only when contiguous.
  if (call.a.stride(-1) != 1 && K > 1) return std::nullopt;
  if (call.a.dim() > 2 && !call.a.is_contiguous()) return std::nullopt;
  const int64_t M = call.a.numel() / K;
  if (M < 1 || M > (call.along_n ? kFewRows : kFewRowsAlongK)) return std::nullopt;
  call.out_sizes = call.a.sizes().vec();
  call.out_sizes.back() = N;
  return call;
}

}  // namespace

bool runFewRowsMatmul(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
#else
  constexpr bool avx512 = false;
#endif
  if (!avx512) return false;
  std::optional<Call> call = fewRowsCall(op, stack);
  if (!call) return false;
  static Counter& counter = counterNamed("FewRowsMatmuls");
  counter.add();
  at::Tensor out = at::empty(call->out_sizes, call->a.options());
  const int64_t K = call->a.size(-1), N = call->b.size(1);
  Product p{call->a.const_data_ptr<float>(),
            call->a.dim() > 2 ? K : call->a.stride(0),
            call->b.const_data_ptr<float>(),
            call->b.stride(0),
            call->b.stride(1),
            call->bias.defined() ? call->bias.const_data_ptr<float>() : nullptr,
            out.mutable_data_ptr<float>(),
            call->a.numel() / K,
            K,
            N,
            call->along_n};
  // Blocks of 64 columns, each thread's share a whole number of them.
  constexpr int64_t kBlock = 4 * kLanes;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, 4, [&](int64_t begin, int64_t end) {
    productColumns(p, begin * kBlock, std::min(end * kBlock, N));
  });
  stack.clear();
  stack.emplace_back(std::move(out));
  return true;
}

}  // namespace lazyfuse

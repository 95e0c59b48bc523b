// The smallest LibTorch program on the lazy device: record a few ops, run them with
// lazyfuse::markStep(), and check the result against the same ops run eagerly on the CPU.
//
// Linking liblazyfuse.so is all the setup there is: loading it registers the Lazy kernels.

#include <lazyfuse/lazyfuse.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <iostream>

namespace {

// A small MLP-like expression: matmul, bias, pointwise ops and a reduction.
at::Tensor compute(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor h = at::matmul(x, w) + b;
  h = at::relu(h) * 0.5 + at::tanh(h);
  return h.sum(/*dim=*/1) / h.size(1);
}

}  // namespace

int main() {
  const c10::Device lazy(c10::DeviceType::Lazy);
  at::manual_seed(0);
  const at::Tensor x_cpu = at::randn({8, 16});
  const at::Tensor w_cpu = at::randn({16, 4});
  const at::Tensor b_cpu = at::ones({4});

  const at::Tensor expected = compute(x_cpu, w_cpu, b_cpu);

  // Inputs reach the lazy device by transfer and by a lazy factory.
  const at::Tensor x = x_cpu.to(lazy);
  const at::Tensor w = w_cpu.to(lazy);
  const at::Tensor b = at::ones({4}, at::TensorOptions().device(lazy));
  const at::Tensor y = compute(x, w, b);

  lazyfuse::markStep();
  lazyfuse::wait();
  const at::Tensor actual = y.to(at::kCPU);

  std::cout << "lazy result:\n" << actual << "\n";
  std::cout << "eager CPU result:\n" << expected << "\n";
  if (!at::allclose(actual, expected, /*rtol=*/1e-4, /*atol=*/1e-5)) {
    std::cerr << "MISMATCH: max abs difference " << (actual - expected).abs().max().item<float>()
              << "\n";
    return EXIT_FAILURE;
  }
  std::cout << "lazy and eager CPU agree\n";
  return EXIT_SUCCESS;
}

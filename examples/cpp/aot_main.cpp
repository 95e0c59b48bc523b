// Runs a model exported ahead of time with lazyfuse.aot_compile (examples/aot/export_model.py
// writes one, with inputs and eager PyTorch's outputs) in a LibTorch program with no Python:
//
//   lazyfuse_aot_example model.lfpkg inputs.pt expected.pt
//
// inputs.pt and expected.pt are lists of tensors saved by torch.save.

#include <lazyfuse/lazyfuse.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

namespace {

std::vector<at::Tensor> loadTensors(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const c10::IValue list = torch::jit::pickle_load(bytes);
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& v : list.toListRef()) {
    tensors.push_back(v.toTensor());
  }
  return tensors;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " model.lfpkg inputs.pt expected.pt\n";
    return EXIT_FAILURE;
  }
  const lazyfuse::AotModel model(argv[1]);
  const std::vector<at::Tensor> inputs = loadTensors(argv[2]);
  const std::vector<at::Tensor> expected = loadTensors(argv[3]);

  std::vector<at::Tensor> outputs;
  for (int run = 0; run < 3; ++run) outputs = model.run(inputs);  // the first run loads kernels

  if (outputs.size() != expected.size()) {
    std::cerr << "MISMATCH: " << outputs.size() << " outputs, expected " << expected.size() << "\n";
    return EXIT_FAILURE;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor out = outputs[i].to(at::kCPU);
    if (!at::allclose(out, expected[i], /*rtol=*/1e-4, /*atol=*/1e-5)) {
      std::cerr << "MISMATCH in output " << i << ": max abs difference "
                << (out - expected[i]).abs().max().item<float>() << "\n";
      return EXIT_FAILURE;
    }
  }
  std::cout << "ahead-of-time package: " << outputs.size() << " output(s) of shape "
            << outputs[0].sizes() << " match eager PyTorch\n";
  return EXIT_SUCCESS;
}

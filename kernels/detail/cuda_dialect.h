#pragma once

// The CUDA C++ dialect rendered GPU kernels are written in: the prelude every generated source
// starts with (the lf_<fn> kernel functions, 16-bit float conversions, group reductions), and
// how types and constants are spelled. Defined in kernels/cuda_prelude.cpp, used by
// kernels/cuda_codegen.cpp. See Note [CUDA prelude].

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace lazyfuse::detail {

const char* cudaPrelude();
/// The type an instruction of `dtype` computes in (Note [Kernel IR]: never Half or BFloat16).
const char* cudaComputeType(c10::ScalarType dtype);
/// The element type of a buffer: Bool is a byte, Half and BFloat16 their 16 bits.
const char* cudaStorageType(c10::ScalarType dtype);
std::string cudaLiteral(c10::ScalarType dtype, double fvalue, int64_t ivalue);
/// The lowest (or largest) value of a compute type: the identity of max (min).
std::string cudaExtremeLiteral(c10::ScalarType dtype, bool lowest);

}  // namespace lazyfuse::detail

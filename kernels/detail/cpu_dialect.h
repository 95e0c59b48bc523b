#pragma once

// The C++ dialect rendered CPU kernels are written in: the prelude every generated source
// starts with (C math declarations and the lf_<fn> kernel functions), and how types and
// constants are spelled. Defined in kernels/cpu_prelude.cpp, used by kernels/cpu_codegen.cpp.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace lazyfuse::detail {

const char* cpuPrelude();
const char* cpuComputeType(c10::ScalarType dtype);
const char* cpuStorageType(c10::ScalarType dtype);
std::string cpuLiteral(c10::ScalarType dtype, double fvalue, int64_t ivalue);
std::string cpuExtremeLiteral(c10::ScalarType dtype, bool lowest);

}  // namespace lazyfuse::detail

#pragma once

// Note [Shape-generic kernels]
// A kernel's code depends on sizes, strides and offsets only through the integer constants its
// renderer writes: loop bounds, index arithmetic, a view's offset. So lazyfuse lowers and renders
// every new graph with its concrete sizes, as before, and then splits each rendered function into
// its *shape* (the text with every integer constant and its own name taken out) and the list of
// those constants (splitConstants). Two functions of one shape are the same code up to constants:
// a *family*. The first function of a family is compiled as it is (specialized). When a function
// of a known family comes back with other constants, the constants that differ become run-time
// arguments, and so do those that started out equal to one that differs (duck sizing, as PyTorch's
// symbolic shapes: equal sizes are taken for one size; 0 and 1 stay constants): one generic
// function is compiled, which every later function of that family whose other constants are the
// ones it was compiled with runs without a compile. The generic
// function with the concrete constants as arguments is, token for token, the specialized function
// for those sizes, so it is right by construction; everything the renderer decides from a size (a
// vector loop, a block of Half conversions, streaming stores, 0 and 1 sizes folded away, on a GPU
// the threads per point) is part of the shape, so a size that would render other code lands in
// another family and is specialized on its own. lazyfuse.mark_dynamic makes the kernels of the
// graphs that read a tensor generic from their first compile, every constant but 0 and 1 an
// argument (as LAZYFUSE_DYNAMIC=dynamic does for all).
//
// The choice is kernels/kernel_families.cpp's. The CPU target compiles what is chosen function
// by function (kernels/cpu_kernel_families.cpp); the CUDA targets render each plan with the
// chosen functions, so that NVRTC's cache serves a plan of new sizes
// (kernels/cuda_kernel_families.cpp).
//
// Host-side work stays concrete: each new graph (a new size included) is still lowered, so buffer
// sizes, launch grids, extern-call arguments and memory plans come from its sizes; only the
// compile is shared. A graph already seen with these sizes is a plan-cache hit, as before.
//
// A constant is a decimal integer literal (suffixes u, U, l, L allowed) that fits in 64 bits, or
// a floating literal with an integer value written as digits and ".0" (a mean divides by 256.0),
// outside comments, string literals and preprocessor lines, and not part of an identifier. As an
// argument a floating one is converted back to its type: ((double)lf_a3). Other floating
// literals (1.5, 1e30, 2.f), preprocessor lines and literals written against '<' or '>' stay in
// the shape: a pragma's or a template's argument must be a constant (lf_group_reduce<lf_max, 32>;
// the renderers put spaces around comparison operators).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lazyfuse {

struct KernelText {
  /// The text with each integer constant replaced by '\x01', each floating one by '\x03' (both
  /// followed by the literal's suffix) and each whole-word use of the function's name by '\x02';
  /// equal shapes mean equal code up to constants and name.
  std::string shape;
  std::vector<int64_t> constants;  // in the order they appear
};

/// Splits one rendered function, named `name`, into its shape and constants. With
/// `constant_brackets` (CUDA, where a register pack's element and a shared array's length must
/// be constants) a literal alone between brackets (`w0.v[2]`, `s3[8]`) and the argument of
/// `__launch_bounds__` stay in the shape too.
KernelText splitConstants(const std::string& text, const std::string& name,
                          bool constant_brackets = false);

/// The text of `kernel` named `name`: constant k is written as `argument(k)` where runtime[k], and
/// as constants[k] elsewhere (`constants` and `runtime` have one entry per constant).
std::string joinConstants(const KernelText& kernel, const std::vector<int64_t>& constants,
                          const std::vector<bool>& runtime, const std::string& name,
                          const std::function<std::string(size_t)>& argument);

}  // namespace lazyfuse

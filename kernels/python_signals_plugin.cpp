// liblazyfuse_python.so: Python's Ctrl-C check for a sync, behind a C interface. It is the one
// part of lazyfuse built against Python and torch's Python headers; liblazyfuse.so loads it with
// dlopen the first time a long sync polls inside a Python process. See Note [Interrupting a
// sync] in kernels/interrupts.cpp.

#include <torch/csrc/Exceptions.h>

/// Returns when no signal is pending; runs Python's handlers otherwise, and throws the exception
/// a handler raised (KeyboardInterrupt for Ctrl-C) as torch's python_error, which torch's
/// bindings restore as the Python exception.
extern "C" __attribute__((visibility("default"))) void lazyfuse_check_python_signals() {
  pybind11::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return;
  python_error error;
  error.persist();
  throw error;
}

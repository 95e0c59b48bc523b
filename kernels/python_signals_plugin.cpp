// liblazyfuse_python.so: Python's Ctrl-C check for a sync, behind a C interface. It is the one
// part of lazyfuse built against Python and torch's Python headers; liblazyfuse.so loads it with
// dlopen the first time a long sync polls inside a Python process. See Note [Interrupting a
// sync] in kernels/interrupts.cpp.

#include <torch/csrc/Exceptions.h>

#include <csignal>

namespace {

/// Whether SIGINT's Python handler is Python's own, signal.default_int_handler (which raises
/// KeyboardInterrupt), rather than one the program installed.
bool defaultSigintHandler() {
  PyObject* module = PyImport_ImportModule("signal");
  if (module == nullptr) {
    PyErr_Clear();
    return false;
  }
  PyObject* current = PyObject_CallMethod(module, "getsignal", "i", SIGINT);
  PyObject* standard = PyObject_GetAttrString(module, "default_int_handler");
  const bool is_default = current != nullptr && current == standard;
  Py_XDECREF(current);
  Py_XDECREF(standard);
  Py_DECREF(module);
  PyErr_Clear();
  return is_default;
}

}  // namespace

/// Returns when no Ctrl-C is pending. On one, with Python's default SIGINT handler, throws the
/// KeyboardInterrupt as torch's python_error, which torch's bindings restore as the Python
/// exception. No Python handler runs here: a handler of the program's own (SIGINT, SIGTERM,
/// SIGUSR1...) could start another sync on this thread in the middle of this one, so SIGINT is
/// left pending for such a handler, and every other signal too, as before: they run when the
/// sync returns.
extern "C" __attribute__((visibility("default"))) void lazyfuse_check_python_signals() {
  pybind11::gil_scoped_acquire gil;
  if (!PyOS_InterruptOccurred()) return;  // takes SIGINT's pending mark
  if (!defaultSigintHandler()) {
    PyErr_SetInterrupt();  // pending again, for the program's handler after the sync
    return;
  }
  PyErr_SetNone(PyExc_KeyboardInterrupt);
  python_error error;
  error.persist();
  throw error;
}

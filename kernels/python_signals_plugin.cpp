// liblazyfuse_python.so: Python's Ctrl-C check for a sync and torch's Python-side device
// initialization, behind a C interface. It is the one part of lazyfuse built against Python and
// torch's Python headers; liblazyfuse.so loads it with dlopen (kernels/python_plugin.cpp) the
// first time it needs one of them inside a Python process. See Note [Interrupting a sync] in
// kernels/interrupts.cpp and Note [Seeds queued before CUDA starts] in kernels/python_plugin.cpp.

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

/// torch's Python-side initialization of a device type ("cuda": torch.cuda._lazy_init()), which
/// runs the seeding calls torch.manual_seed queued for it: Note [Seeds queued before CUDA
/// starts] (kernels/python_plugin.cpp). A device type without a torch module or _lazy_init is
/// left alone; a failing initialization is thrown as torch's python_error.
extern "C" __attribute__((visibility("default"))) void lazyfuse_python_device_init(
    const char* type) {
  pybind11::gil_scoped_acquire gil;
  PyObject* torch = PyImport_ImportModule("torch");
  PyObject* module = torch == nullptr ? nullptr : PyObject_GetAttrString(torch, type);
  Py_XDECREF(torch);
  if (module == nullptr || !PyObject_HasAttrString(module, "_lazy_init")) {
    Py_XDECREF(module);
    PyErr_Clear();
    return;
  }
  PyObject* result = PyObject_CallMethod(module, "_lazy_init", nullptr);
  Py_DECREF(module);
  if (result != nullptr) {
    Py_DECREF(result);
    return;
  }
  python_error error;
  error.persist();
  throw error;
}

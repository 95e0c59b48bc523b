"""The `lazy` device type for PyTorch's device-generic test harness, backed by lazyfuse.

PyTorch's harness (`torch.testing._internal.common_device_type`) imports this file itself when
`TORCH_TEST_DEVICES` names it: it runs the file with `runpy.run_path(path, init_globals=...)`
(the harness's own globals), so `DeviceTypeTestBase` is already defined here, and appends
`TEST_CLASS` to `device_type_test_bases`. Then `instantiate_device_type_tests(...,
only_for="lazy")` and `@ops(op_db)` parametrize over `lazy`. `harness.register_lazy_device()` sets
this up (and does the same by hand when the harness was imported before the variable was set).

Do not import `common_device_type` here (the harness's instructions: it would import this file a
second time and make a second class), and never use the harness's built-in `LazyTestBase`: its
`setUpClass` calls `torch._lazy.ts_backend.init()`, which puts the TorchScript lazy backend on the
`Lazy` key; lazyfuse owns that key and refuses to run once that has happened.
"""

try:
    _DeviceTypeTestBase = DeviceTypeTestBase  # noqa: F821 (defined by the harness's runpy globals)
except NameError as e:
    raise ImportError(
        "lazy_device_type.py is loaded by torch's device-type test harness through "
        "TORCH_TEST_DEVICES (runpy with the harness's globals), not imported; use "
        "harness.register_lazy_device()"
    ) from e


class LazyfuseTestBase(_DeviceTypeTestBase):
    """Runs device-generic tests on `torch.device("lazy")` served by lazyfuse."""

    device_type = "lazy"
    lazyfuse_backend = True  # how harness.py tells this base from torch's built-in LazyTestBase

    def _should_stop_test_suite(self):
        # A failing op on the lazy device says nothing about the next one (unlike a CUDA error).
        return False

    @classmethod
    def get_primary_device(cls):
        # With its index, as the CUDA base gives "cuda:0": a lazy tensor's device is lazy:0, and
        # tests compare it with torch.device(device).
        return "lazy:0"

    @classmethod
    def setUpClass(cls):
        import lazyfuse  # noqa: F401  (loads the library; raises if the TorchScript backend is up)


TEST_CLASS = LazyfuseTestBase

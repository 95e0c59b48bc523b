"""Finding and loading liblazyfuse.so, and keeping torch's TorchScript lazy backend out.

Note [One owner of the Lazy key]
Both lazyfuse and torch's TorchScript lazy backend (`torch._lazy.ts_backend.init()`) register
kernels on the built-in `Lazy` dispatch key. Only one of them can own it, so:
  * `import lazyfuse` refuses when the TorchScript backend is already initialized (checked here
    before loading, and by the library itself through `torch.ops.lazyfuse.check_backend()`);
  * once lazyfuse is loaded, `torch._lazy.ts_backend.init()` raises instead of taking over.
"""

import functools
import os
import pathlib

import torch

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
_LIBRARY_NAME = "liblazyfuse.so"

_loaded_path = None


def library_path():
    """Path of liblazyfuse.so: the copy inside the package, else $LAZYFUSE_LIBRARY, else
    build/liblazyfuse.so of the source tree (for an in-tree run)."""
    bundled = _PACKAGE_DIR / "lib" / _LIBRARY_NAME
    if bundled.is_file():
        return str(bundled)
    from_env = os.environ.get("LAZYFUSE_LIBRARY")
    if from_env:
        if not os.path.isfile(from_env):
            raise RuntimeError(
                f"LAZYFUSE_LIBRARY is set to {from_env!r}, but no such file exists"
            )
        return os.path.abspath(from_env)
    in_tree = _PACKAGE_DIR.parent.parent / "build" / _LIBRARY_NAME
    if in_tree.is_file():
        return str(in_tree)
    raise RuntimeError(
        f"cannot find {_LIBRARY_NAME}: looked for {bundled}, $LAZYFUSE_LIBRARY (not set) and "
        f"{in_tree}; build it with `make build` at the repository root, or point "
        "LAZYFUSE_LIBRARY at a built copy"
    )


def _ts_backend_initialized():
    """Whether a torch::lazy backend (in practice the TorchScript one) has been registered.

    torch exposes no flag for it; `_get_default_device_type()` raises "Lazy tensor backend not
    registered" until `torch._lazy.ts_backend.init()` registers one.
    """
    try:
        torch._C._lazy._get_default_device_type()
    except RuntimeError:
        return False
    return True


def _lazyfuse_ops_registered():
    try:
        torch.ops.lazyfuse.mark_step
    except (AttributeError, RuntimeError):
        return False
    return True


def _lazy_key_taken():
    """Whether something other than lazyfuse already has kernels on the Lazy key."""
    if _lazyfuse_ops_registered():
        return False
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return has_kernel("aten::empty.memory_format", "Lazy") or has_kernel("aten::add.Tensor", "Lazy")


_TS_BACKEND_REFUSAL = (
    "lazyfuse owns the 'lazy' device in this process, so torch's TorchScript lazy backend "
    "(torch._lazy.ts_backend.init()) cannot be initialized; use one or the other, in separate "
    "processes (set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to stop `import torch` from loading lazyfuse)"
)


def _refuse_ts_backend_init(*args, **kwargs):
    raise RuntimeError(_TS_BACKEND_REFUSAL)


def _block_ts_backend():
    """Makes torch._lazy.ts_backend.init() raise. Both the Python wrapper and the C entry point
    are replaced, so `from torch._lazy.ts_backend import init` done earlier is caught too."""
    import torch._lazy.ts_backend as ts_backend

    if getattr(ts_backend.init, "_lazyfuse_blocked", False):
        return
    refuse = functools.wraps(ts_backend.init)(_refuse_ts_backend_init)
    refuse._lazyfuse_blocked = True
    ts_backend.init = refuse
    torch._C._lazy_ts_backend._init = _refuse_ts_backend_init


def _check_no_foreign_backend():
    if _ts_backend_initialized():
        raise RuntimeError(
            "cannot load lazyfuse: torch's TorchScript lazy backend was already initialized "
            "(torch._lazy.ts_backend.init() was called) and owns the 'lazy' device; import "
            "lazyfuse in a process that does not call it"
        )
    if _lazy_key_taken():
        raise RuntimeError(
            "cannot load lazyfuse: another library already registered kernels on the Lazy "
            "dispatch key (is torch's TorchScript lazy backend or another lazy backend loaded?)"
        )


def load():
    """Loads liblazyfuse.so once; returns its path."""
    global _loaded_path
    if _loaded_path is not None:
        return _loaded_path
    _check_no_foreign_backend()
    path = library_path()
    torch.ops.load_library(path)
    try:
        torch.ops.lazyfuse.check_backend()
    except RuntimeError as err:
        raise RuntimeError(f"lazyfuse cannot own the 'lazy' device: {err}") from err
    _block_ts_backend()
    _loaded_path = path
    return path

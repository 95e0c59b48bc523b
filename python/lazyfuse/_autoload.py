"""Entry point of the `torch.backends` group: `import torch` calls `autoload()` at its end.

Autoloading must never break `import torch`: every failure becomes a warning, and an explicit
`import lazyfuse` afterwards raises the real error. Set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to turn
autoloading off. See Note [Autoload never breaks import torch] in __init__.py.
"""

import sys
import warnings


def _initializing(module_name):
    module = sys.modules.get(module_name)
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _forget_lazyfuse():
    """Drops the half-initialized package so that the next `import lazyfuse` runs it again."""
    for name in [n for n in sys.modules if n == "lazyfuse" or n.startswith("lazyfuse.")]:
        del sys.modules[name]


def autoload():
    # `import lazyfuse` came first and imported torch, which autoloads us: that outer import
    # finishes initialization (and raises its own errors) once torch is ready.
    if _initializing("lazyfuse"):
        return
    try:
        import lazyfuse

        lazyfuse._initialize()
    except Exception as err:  # noqa: BLE001 (autoload must never break `import torch`)
        _forget_lazyfuse()
        warnings.warn(
            f"lazyfuse was not autoloaded by `import torch` ({type(err).__name__}: {err}); "
            "`import lazyfuse` shows the full error, TORCH_DEVICE_BACKEND_AUTOLOAD=0 silences this",
            RuntimeWarning,
            stacklevel=2,
        )

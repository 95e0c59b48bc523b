"""The device module for "lazy", registered as `torch.lazy` when torch has none.

It gives the "lazy" device the small runtime API other devices have (`torch.cuda`,
`torch.get_device_module("lazy")`). There is one lazy device; it executes on
`lazyfuse.hardware_device()`.
"""

import torch


def is_available():
    """True: importing lazyfuse loaded the library, so lazy tensors work."""
    return True


def is_initialized():
    return True


def device_count():
    return 1


def current_device():
    return 0


def synchronize(device=None):
    """Waits for work already sent to the hardware device. Pending (unsynced) ops are not run:
    call `lazyfuse.mark_step()` for that."""
    torch.ops.lazyfuse.wait()


def manual_seed(seed):
    """Seeds the generator of the hardware device lazy tensors execute on."""
    torch.ops.lazyfuse.manual_seed(int(seed))


def manual_seed_all(seed):
    manual_seed(seed)

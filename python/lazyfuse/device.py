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


# Generator state. Random lazy ops draw from the hardware device's default generator when they
# are recorded (Note [Random ops draw when recorded]), so its state is the lazy device's: saving
# and restoring it around recorded ops (torch.utils.checkpoint, torch.random.fork_rng with
# device_type="lazy") reproduces their values.
_initialized = True


def _hardware():
    return torch.device(torch.ops.lazyfuse.hardware_device())


def get_rng_state(device="lazy"):
    """The state of the generator random lazy ops draw from, as a CPU uint8 tensor."""
    hardware = _hardware()
    if hardware.type == "cpu":
        return torch.get_rng_state()
    return torch.get_device_module(hardware.type).get_rng_state(hardware)


def set_rng_state(new_state, device="lazy"):
    """Restores a state from get_rng_state()."""
    hardware = _hardware()
    if hardware.type == "cpu":
        torch.set_rng_state(new_state)
    else:
        torch.get_device_module(hardware.type).set_rng_state(new_state, hardware)


def get_rng_state_all():
    return [get_rng_state()]


def set_rng_state_all(new_states):
    set_rng_state(new_states[0])


class device:
    """`with torch.lazy.device(i)`: there is one lazy device, so this selects nothing."""

    def __init__(self, device):
        self.idx = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

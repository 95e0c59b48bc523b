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


def set_device(device):
    """There is one lazy device: selecting it does nothing."""


# Streams and events. A lazy device runs the ops of a step in the order they were recorded, so
# work put "on another stream" is already ordered with everything recorded before and after it:
# a stream or an event here orders nothing more. They exist so that device-generic code that
# overlaps work with streams (FSDP2's all-gathers and reduce-scatters, prefetching) runs on lazy
# tensors unchanged.
class Stream:
    """A stream of the lazy device: its work runs in recorded order with all other work."""

    def __init__(self, device=None, priority=0):
        self.device = torch.device("lazy", 0)
        self.priority = priority

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self):
        return True

    def synchronize(self):
        synchronize()

    def __eq__(self, other):
        return isinstance(other, Stream)

    def __hash__(self):
        return hash(Stream)


class Event:
    """An event of the lazy device: complete as soon as it is recorded (see Stream)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        pass

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        synchronize()


_default_stream = Stream()


def current_stream(device=None):
    return _default_stream


def default_stream(device=None):
    return _default_stream


class StreamContext:
    """`with torch.lazy.stream(s)`: selects nothing, as every stream is the one order."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


def stream(stream):
    return StreamContext(stream)

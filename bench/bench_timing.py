"""Timing helpers shared by the CPU benchmark scripts in bench/ (imported by plain name: a script
run as `python bench/<name>.py` has bench/ on its path)."""

import time


def timed(fn, repeats):
    """Milliseconds per call of `fn`, over `repeats` calls in a row."""
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) * 1e3 / repeats


def interleaved_medians(sides, calls, rounds, warmup=3):
    """Milliseconds per call of each side ({name: fn}): every side called `warmup` times first
    (compiles and warm-up), then `rounds` rounds timing `calls` calls of each side in turn; the
    median over rounds."""
    import statistics

    for fn in sides.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            times[name].append(timed(fn, calls))
    return {name: statistics.median(v) for name, v in times.items()}


def cpu_busy(seconds=1.0):
    """Fraction of the machine's CPU time used over `seconds`: measured before and after a run,
    it shows the load that other processes put next to it."""
    def read():
        with open("/proc/stat") as f:
            parts = [int(v) for v in f.readline().split()[1:]]
        return sum(parts), parts[3] + parts[4]

    total0, idle0 = read()
    time.sleep(seconds)
    total1, idle1 = read()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def processor():
    """The CPU's model name and widest vector extension, from /proc/cpuinfo (the architecture
    name elsewhere). Fused CPU kernels are compiled for the machine they run on, so which loops
    GCC vectorizes, and the sweep's figures, depend on it (AVX-512 or AVX2 only)."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return platform.processor() or platform.machine()
    fields = {}
    for line in info.split("\n\n")[0].splitlines():  # the first processor's block
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    name = fields.get("model name", platform.machine())
    flags = fields.get("flags", "").split()
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    family = f"family {fields['cpu family']} model {fields['model']}, " if "model" in fields else ""
    return f"{name} ({family}{vector})"


def run_header(busy_before):
    """The first line a CPU benchmark prints: versions, threads, processor, the load beside it."""
    import torch

    import lazyfuse
    return (f"lazyfuse {lazyfuse.__version__} on {lazyfuse.hardware_device()}, torch "
            f"{torch.__version__}, {torch.get_num_threads()} threads, "
            f"{processor()}, CPU busy before the run "
            f"{busy_before:.0%}")

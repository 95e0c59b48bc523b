"""Counters and timers from the library, as a dict and as a readable table."""

import torch

# A timer comes from the library as two entries, "<Name>.count" and "<Name>.total_ns".
_TIMER_FIELDS = ("count", "total_ns")


def metrics():
    """Returns {counter: int, timer: {"count": int, "total_ns": int}}, sorted by name."""
    names, values = torch.ops.lazyfuse.metrics()
    result = {}
    for name, value in zip(names, values):
        base, dot, field = name.rpartition(".")
        if dot and field in _TIMER_FIELDS:
            result.setdefault(base, {f: 0 for f in _TIMER_FIELDS})[field] = int(value)
            continue
        result[name] = int(value)
    return dict(sorted(result.items()))


def reset_metrics():
    torch.ops.lazyfuse.reset_metrics()


def _table(header, rows):
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells):
        # First column left-aligned (names), the rest right-aligned (numbers).
        parts = [str(cells[0]).ljust(widths[0])]
        parts += [str(c).rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [line(header), rule] + [line(row) for row in rows]


def metrics_report(values=None):
    """A readable, aligned table of `metrics()` (or of the given dict)."""
    values = metrics() if values is None else values
    counters = [(k, v) for k, v in values.items() if not isinstance(v, dict)]
    timers = [(k, v) for k, v in values.items() if isinstance(v, dict)]
    out = []
    if counters:
        out += _table(("counter", "value"), [(k, f"{v:,}") for k, v in counters])
    if timers:
        rows = []
        for name, t in timers:
            count, total_ns = t["count"], t["total_ns"]
            mean_us = total_ns / count / 1e3 if count else 0.0
            rows.append((name, f"{count:,}", f"{total_ns / 1e6:,.3f}", f"{mean_us:,.1f}"))
        if out:
            out.append("")
        out += _table(("timer", "count", "total ms", "mean us"), rows)
    if not out:
        return "(no metrics recorded)"
    return "\n".join(out)

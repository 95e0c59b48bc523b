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


def last_plan_profile():
    """The steps of the last plan that ran to its end, in order, as (name, milliseconds) pairs:
    each fused kernel (named with the ops whose values it writes), extern call and view of the
    last synced graph, with the host time it took (on a GPU, the launch). torch.profiler shows
    the same steps under the same names. Empty before any plan ran."""
    labels, step_ns = torch.ops.lazyfuse.last_plan_profile()
    return [(label, ns / 1e6) for label, ns in zip(labels, step_ns)]


def metrics_report(values=None, last_plan=False, top=20):
    """A readable, aligned table of `metrics()` (or of the given dict); with `last_plan`, followed
    by the `top` slowest steps of the last plan (last_plan_profile())."""
    if last_plan:
        steps = sorted(last_plan_profile(), key=lambda step: -step[1])
        total = sum(ms for _, ms in steps)
        rows = [(label, f"{ms:,.3f}", f"{100 * ms / total:.1f}" if total else "0.0")
                for label, ms in steps[:top]]
        plan = _table(("last plan step", "ms", "%"), rows) if rows else ["(no plan ran yet)"]
        return metrics_report(values) + "\n\n" + "\n".join(plan)
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

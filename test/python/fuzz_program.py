"""A fuzz program: its steps (Python statements over tensors named t0, t1, ...), its text as a
runnable script, and the namespace a step runs in, eagerly or on lazy."""

import re
from dataclasses import dataclass, field

import torch

import lazyfuse
from fuzz_config import OVERLAP


def inp(shape, dtype, seed):
    """An input tensor on the CPU, made from `seed`."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 2).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(-4, 5, shape, generator=g, dtype=dtype)


INP_SOURCE = '''def inp(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 2).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(-4, 5, shape, generator=g, dtype=dtype)'''


@dataclass
class Step:
    code: str  # a statement over t<N>, DEV, torch, lazyfuse, inp
    kind: str = "op"  # op | input | mark_step | sync | check | del
    new: str = None  # the name it binds
    expr: str = None  # check: the value compared (bound to _v)
    names: tuple = ()  # sync: the tensors it syncs
    overlap: bool = False  # writes into a tensor whose elements overlap themselves
    full_check: bool = False  # compare every live tensor after it
    src: str = None  # a view step: the tensor it views
    tags: frozenset = frozenset()  # a view step: what the view is (see Generator.tags)
    loose_layout: bool = False  # its result's strides are not compared (KNOWN_BUGS)

    def text(self):
        if self.kind == "check":
            return f"print({self.expr})"
        return self.code


@dataclass
class Program:
    seed: int
    fusion: str
    steps: list = field(default_factory=list)

    def text(self, mark=None, note=None):
        lines = [f"# lazyfuse fuzz: seed={self.seed} LAZYFUSE_FUSION={self.fusion} "
                 f"overlap={int(OVERLAP)}",
                 "import os",
                 f"os.environ['LAZYFUSE_FUSION'] = {self.fusion!r}",
                 "import torch, lazyfuse",
                 "DEV = 'lazy'  # 'cpu' runs it eagerly",
                 INP_SOURCE]
        for i, step in enumerate(self.steps):
            line = step.text()
            if i == mark:
                line += f"  # <-- step {i}" + (f": {note}" if note else "")
            lines.append(line)
        if mark == len(self.steps):
            lines.append(f"# <-- at the end" + (f": {note}" if note else ""))
        return "\n".join(lines)


class _EagerLazyfuse:
    """What `lazyfuse` is for the eager run: syncs do nothing."""

    @staticmethod
    def mark_step():
        pass

    @staticmethod
    def sync(*tensors):
        pass


def namespace(device):
    return {"torch": torch, "inp": inp, "DEV": device,
            "lazyfuse": lazyfuse if device == "lazy" else _EagerLazyfuse}


def names_in(code):
    return set(re.findall(r"\bt\d+\b", code))


def live_names(ns):
    return sorted((k for k, v in ns.items() if k[:1] == "t" and k[1:].isdigit()
                   and isinstance(v, torch.Tensor)), key=lambda k: int(k[1:]))


def fmt_scalar(v):
    return repr(v)

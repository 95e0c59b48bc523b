"""Differential fuzzer: random small programs run eagerly and on the lazy device, in lockstep.

A program is a list of Python statements over tensors named t0, t1, ... built from a seed
(`random.Random(seed)`, inputs from torch generators seeded from it): inputs of mixed dtypes
(float32, float64, int64, bool), views (slices with steps, select, narrow, transpose, permute,
view/reshape, unsqueeze/squeeze, expand, diagonal, unfold, as_strided, flatten, chunk, unbind),
in-place ops on views and bases (add_, mul_, copy_, fill_, zero_, clamp_, masked_fill_,
index_add_, index_copy_, slice and mask assignment, out=), out-of-place pointwise ops with
broadcasting and dtype promotion, reductions (sum, mean, amax, amin, argmax, softmax), matmul,
deletions, and syncs (`lazyfuse.mark_step()`, `lazyfuse.sync(...)`, `.cpu()` of an
intermediate, `.item()`). The program is built first, against an eager shadow run that keeps
its steps valid, then run twice from the same inputs: on the reference device (eager) and on
lazy copies, step by step. After each step the new tensor's dtype, shape, strides, storage
offset and contiguity must be eager's; at each sync point (and at the end) the values of every
live tensor too. A step that raises eagerly must raise the same exception type on lazy, at the
step or at the sync that follows it; the program stops there. A lazy step or sync that raises
where eager does not is a failure. A failure prints the seed and the program as runnable Python
(set DEV to "cpu" to see eager), reduced to the steps it needs.

Writes into tensors whose elements overlap themselves (expand, unfold with step < size,
as_strided with overlapping strides, and views of those) are generated too, unless
LAZYFUSE_FUZZ_OVERLAP=0 (Note [Writes into views that overlap themselves]).

Runs:
  pytest test/python/test_fuzz.py           # CI: test_fuzz_fixed_seeds, a fixed list of seeds
  LAZYFUSE_FUZZ_PROGRAMS=500 LAZYFUSE_FUZZ_SEED=10000 pytest -s test/python/test_fuzz.py
                                            # long mode: 500 programs from seed 10000 instead
                                            # (default start 1000000), each failing seed
                                            # reported, the test failing at the end if any did
Other variables: LAZYFUSE_FUZZ_OVERLAP=0 (no writes into overlapping views),
LAZYFUSE_FUZZ_KNOWN_BUGS=1 (also the cases of the known bugs listed at KNOWN_BUGS, which are
left out otherwise), LAZYFUSE_FUZZ_STEPS=N (ops per program, default 24),
LAZYFUSE_FUZZ_REDUCE=0 (print failing programs unreduced). A program picks
LAZYFUSE_FUSION=always (fused kernels) or auto (small graphs run node by node) from its seed,
unless LAZYFUSE_FUSION is set. With -s the tests print how many programs and steps ran.
"""

import gc
import math
import os
import random
import re
import time
from dataclasses import dataclass, field, replace

import pytest
import torch

import lazyfuse
from helpers import REFERENCE

OVERLAP = os.environ.get("LAZYFUSE_FUZZ_OVERLAP", "1") == "1"
STEPS = int(os.environ.get("LAZYFUSE_FUZZ_STEPS", "24"))
LONG_PROGRAMS = int(os.environ.get("LAZYFUSE_FUZZ_PROGRAMS", "0"))
LONG_START = int(os.environ.get("LAZYFUSE_FUZZ_SEED", "1000000"))
REDUCE = os.environ.get("LAZYFUSE_FUZZ_REDUCE", "1") != "0"
# KNOWN_BUGS: lazyfuse bugs this fuzzer found, whose cases it leaves out so that the fixed seeds
# pass; LAZYFUSE_FUZZ_KNOWN_BUGS=1 generates them again (to check a fix):
# - as_strided of a view that does not start its storage contiguously (x[1:], x.t(), x[0])
#   reads the wrong elements, or its sync fails ("setStorage: ... out of bounds").
# (Fixed since, and generated again: writes through as_strided of a view, through an unfold
# that leaves elements out or of a permuted view, through an expand of a bool tensor, and
# through a non-overlapping part of an overlapping view; Note [Writes into views that overlap
# themselves].)
# - mask assignment into a permuted view (v = x.t(); v[v > 0] = 1) leaves v contiguous, and
#   later its base with the strides of a transpose.
# - torch.logical_and/or results are contiguous where eager's follow a permuted input.
# - elementwise results of an input with a one-element dim whose stride is not its largest
#   (an unfold's window dim) have other strides than eager's (see odd_unit_strides); and the
#   strides of one-element dims may differ from eager's, which changes eager's overlap checks
#   (y = x.diagonal(2, 2, 0).relu(); y.copy_(y.flatten().reshape(2, 1)) raises on lazy only).
KNOWN_BUGS = os.environ.get("LAZYFUSE_FUZZ_KNOWN_BUGS") == "1"
FIXED_FUSION = os.environ.get("LAZYFUSE_FUSION")

# Chosen so that the batch takes about 2 minutes on a 2-core CPU machine (115 s with an empty
# kernel cache; pytest -s prints the totals).
FIXED_SEEDS = list(range(1, 451))

# Tags of Generator.tags (views): no write into a tensor that has one of these.
WRITE_EXCLUDED = frozenset([] if OVERLAP else ["overlap"])

STATS = {"programs": 0, "steps": 0, "raised": 0, "syncs": 0, "failed": 0}


# ---- programs ------------------------------------------------------------------------------


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


# ---- generation ----------------------------------------------------------------------------


def addresses(t):
    """The storage offset of each element of t (a tensor of t's shape)."""
    a = torch.full((), t.storage_offset(), dtype=torch.int64)
    for d, (n, s) in enumerate(zip(t.shape, t.stride())):
        shape = [1] * t.dim()
        shape[d] = n
        a = a + (torch.arange(n) * s).view(shape)
    return a.expand(t.shape)


def overlaps_itself(t):
    if t.numel() <= 1:
        return False
    return torch.unique(addresses(t)).numel() < t.numel()


def storage_id(t):
    return t.untyped_storage().data_ptr() if t.untyped_storage().nbytes() else None


def shares_storage(a, b):
    return storage_id(a) is not None and storage_id(a) == storage_id(b)


def write_hazard(dest, operand):
    """Whether writing `dest` elementwise from `operand` (broadcast to dest) reads an element of
    dest that another element's write changes: then eager's values depend on its loop order."""
    if not isinstance(operand, torch.Tensor) or not shares_storage(dest, operand):
        return False
    da = addresses(dest)
    try:
        oa = addresses(operand).expand(dest.shape)
    except RuntimeError:
        return True
    written = set(da.flatten().tolist())
    return any(o in written and o != d
               for o, d in zip(oa.flatten().tolist(), da.flatten().tolist()))


def permuted(t):
    """Whether t's dims of more than one element are not in the order of their strides."""
    strides = [s for n, s in zip(t.shape, t.stride()) if n > 1]
    return strides != sorted(strides, reverse=True)


def odd_unit_strides(t):
    """Whether t has a dim of one element whose stride is not larger than that of a dim of more
    elements: eager's TensorIterator then orders the dims of an elementwise result by that
    stride, lazy ignores it (KNOWN_BUGS: zeros(3, 2) + zeros(6).as_strided((1, 1, 2), (1, 1, 1))
    has strides (1, 1, 3) eagerly, (6, 2, 1) on lazy); so their results' strides are not
    compared, unless LAZYFUSE_FUZZ_KNOWN_BUGS=1."""
    if KNOWN_BUGS or not isinstance(t, torch.Tensor):
        return False
    big = [s for n, s in zip(t.shape, t.stride()) if n > 1]
    return bool(big) and any(n == 1 and s <= max(big) for n, s in zip(t.shape, t.stride()))


def numel_of(shape):
    return math.prod(shape)


def castable(t, dtype):
    """A float tensor cast to an integer dtype only when its values are finite and small (the
    cast of others is undefined)."""
    if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
        return True
    if dtype.is_floating_point or dtype == torch.bool:
        return True
    return t.numel() == 0 or bool((t.isfinite() & (t.abs() < 2 ** 30)).all())


def fmt_scalar(v):
    return repr(v)


class Generator:
    def __init__(self, seed, n_ops):
        self.seed = seed
        self.rng = random.Random(seed)
        self.n_ops = n_ops
        self.program = Program(seed, FIXED_FUSION or self.rng.choice(["auto", "auto", "always"]))
        self.ns = namespace("cpu")
        self.counter = 0
        self.inputs = set()
        # name -> tags of a view: "overlap" (its elements overlap, or it views a tensor whose
        # elements do), and those of KNOWN_BUGS: "unfold_uncovered" (views an unfold whose
        # windows leave out elements of the dim), "as_strided_of_view" (views an as_strided of
        # a tensor that is not an input), "bool_expand" (views an expand of a bool tensor),
        # "unfold_of_permuted" (views an unfold of a permuted view); and "permuted" (views a
        # transpose or permute).
        # No write into a tensor with a tag in WRITE_EXCLUDED.
        self.tags = {}
        # Names whose lazy strides may differ from eager's (Step.loose_layout, and what is made
        # from those): not read by ops that view or copy as the strides say.
        self.loose = set()
        self.sizes = self.rng.sample([2, 3, 4, 5], 2) + [1]
        self.ended = False

    # -- bookkeeping --

    def fresh(self):
        name = f"t{self.counter}"
        self.counter += 1
        return name

    def live(self):
        return live_names(self.ns)

    def t(self, name):
        return self.ns[name]

    def replay(self):
        self.ns = namespace("cpu")
        for step in self.program.steps:
            exec(step.code, self.ns)

    def add(self, step, must_raise=False):
        """Runs `step` on the shadow; keeps it if it runs (or raises, sometimes: the program
        ends there). Returns whether it was kept."""
        code = compile(step.code, "<step>", "exec")  # a SyntaxError is the generator's bug
        try:
            exec(code, self.ns)
        except Exception:  # noqa: BLE001
            if must_raise or self.rng.random() < (0.3 if step.overlap else 0.06):
                self.program.steps.append(step)
                self.ended = True
                return True
            self.replay()
            return False
        if must_raise:
            self.replay()
            return False
        self.program.steps.append(step)
        if step.new:
            result = self.ns[step.new]
            if step.loose_layout or names_in(step.code) & self.loose:
                self.loose.add(step.new)
            tags = set()
            if step.src is not None and shares_storage(result, self.ns[step.src]):
                # A view of a view keeps its tags (a write through it reaches the same base
                # through the same view).
                tags = set(self.tags.get(step.src, ())) | set(step.tags)
            for name in self.live():  # an op that returns its input (x.bool() of a bool x)
                if name != step.new and self.ns[name] is result:
                    tags |= self.tags.get(name, frozenset())
            if overlaps_itself(result):
                tags.add("overlap")
            self.tags[step.new] = frozenset(tags)
        return True

    # -- choices --

    def pick(self, pred=lambda t: True, writable=False, stable_layout=False):
        """A live tensor's name (None if none fits): one `pred` accepts; `writable`: that may be
        written; `stable_layout`: whose strides lazy gives as eager does (not in self.loose)."""
        names = [n for n in self.live() if pred(self.t(n))]
        if stable_layout:
            names = [n for n in names if n not in self.loose]
        if writable:
            names = [n for n in names if not self.tags.get(n, frozenset()) & WRITE_EXCLUDED]
            overlapping = [n for n in names if "overlap" in self.tags.get(n, ())]
            if OVERLAP and overlapping and self.rng.random() < 0.6:
                names = overlapping
        return self.rng.choice(names) if names else None

    def shape(self):
        nd = self.rng.choices([0, 1, 2, 3, 4], [2, 15, 40, 30, 13])[0]
        while True:
            s = tuple(self.rng.choice(self.sizes + [2, 3, 4, 5, 1]) for _ in range(nd))
            if numel_of(s) <= 96:
                return s

    def scalar(self, dtype=None):
        r = self.rng.random()
        if dtype is not None and dtype == torch.bool:
            return self.rng.choice([True, False])
        if (dtype is not None and not dtype.is_floating_point) or r < 0.4:
            return self.rng.randint(-3, 3)
        if r < 0.95:
            return self.rng.choice([0.5, -1.5, 2.0, 0.25, -0.75, 3.0])
        return self.rng.choice([True, False])

    def dim(self, t):
        d = self.rng.randrange(t.dim())
        return d - t.dim() if self.rng.random() < 0.2 else d

    def broadcastable_shape(self, target):
        nd = len(target)
        drop = self.rng.randint(0, nd) if self.rng.random() < 0.4 else 0
        return tuple(1 if self.rng.random() < 0.3 else n for n in target[drop:])

    def operand(self, target, dtype=None, exact=False, scalar_ok=True, wild=True):
        """(expr, value) of an operand that broadcasts to `target` (exactly `target` if exact),
        from the live tensors."""
        if scalar_ok and self.rng.random() < 0.3:
            v = self.scalar(dtype)
            return fmt_scalar(v), v
        target = tuple(target)
        r = self.rng.random()
        if wild and r < 0.05:  # anything: maybe an error
            name = self.pick()
            return name, self.t(name)
        if r < 0.5:
            def fits(t):
                if exact:
                    return tuple(t.shape) == target
                try:
                    return torch.broadcast_shapes(t.shape, target) == target
                except RuntimeError:
                    return False
            name = self.pick(fits)
            if name is not None:
                expr = name
                if dtype is not None and self.t(name).dtype != dtype:
                    expr = f"{name}.to({dtype})"
                return expr, eval(expr, self.ns)
        shape = target if exact else self.broadcastable_shape(target)
        n = numel_of(shape)
        name = self.pick(lambda t: t.numel() >= n, stable_layout=True)
        if name is not None:
            src = self.t(name)
            expr = f"{name}.flatten()" if n == src.numel() else f"{name}.flatten()[:{n}]"
            expr += f".reshape({shape})"
            if dtype is not None and src.dtype != dtype:
                expr += f".to({dtype})"
        else:
            dt = dtype or torch.float32
            expr = f"torch.linspace(-3, 3, {n}, device=DEV).reshape({shape})"
            if dt != torch.float32:
                expr += f".to({dt})"
        return expr, eval(expr, self.ns)

    def index_text(self, t, allow_int=True):
        """A basic index (ints, slices with steps, None, ...) into t."""
        parts = []
        nd = t.dim()
        k = self.rng.randint(1, nd) if nd else 0
        dims = list(range(nd))
        ellipsis = nd and self.rng.random() < 0.15
        dims = dims[nd - k:] if ellipsis else dims[:k]
        if ellipsis:
            parts.append("...")
        for d in dims:
            n = t.shape[d]
            r = self.rng.random()
            if allow_int and r < 0.2 and n > 0:
                parts.append(str(self.rng.randrange(-n, n)))
            elif r < 0.3:
                parts.append(":")
            else:
                start = self.rng.choice([None, self.rng.randint(-n, n)])
                stop = self.rng.choice([None, None, self.rng.randint(-n, n + 1)])
                step = self.rng.choice([None, None, 2, 3, 1])
                s = ("" if start is None else str(start)) + ":" + \
                    ("" if stop is None else str(stop))
                if step is not None:
                    s += f":{step}"
                parts.append(s)
            if self.rng.random() < 0.07:
                parts.append("None")
        if not parts:
            parts.append(self.rng.choice(["None", "...", "()"]) if nd == 0 else ":")
        return ", ".join(parts) if parts != ["()"] else "()"

    # -- step builders --

    def new_input(self):
        dtype = self.rng.choices([torch.float32, torch.float64, torch.int64, torch.bool],
                                 [50, 15, 20, 15])[0]
        name = self.fresh()
        code = f"{name} = inp({self.shape()}, {dtype}, {self.rng.randrange(1 << 20)}).to(DEV)"
        if self.rng.random() < 0.3:
            code += ".clone()"
        self.inputs.add(name)
        return Step(code, kind="input", new=name)

    def view_step(self):
        rng = self.rng
        kinds = ["slice", "slice", "select", "narrow", "transpose", "permute", "view",
                 "unsqueeze", "squeeze", "expand", "diagonal", "unfold", "as_strided", "flatten",
                 "chunk", "unbind", "detach", "contiguous", "mT"]
        if OVERLAP:
            kinds += ["expand", "unfold", "as_strided"]
        kind = rng.choice(kinds)
        # Whether these view or copy depends on the strides.
        name = self.pick(stable_layout=kind in ("view", "flatten", "contiguous", "as_strided"))
        if name is None:
            return None
        t = self.t(name)
        nd = t.dim()
        e = None
        tags = set()
        if kind == "slice":
            e = f"{name}[{self.index_text(t)}]"
        elif kind == "select" and nd:
            d = self.dim(t)
            n = t.shape[d]
            i = rng.randrange(-n, n) if n and rng.random() < 0.95 else n
            e = f"{name}.select({d}, {i})" if rng.random() < 0.5 or d < 0 else \
                f"{name}[{', '.join([':'] * d + [str(i)])}]"
        elif kind == "narrow" and nd:
            d = self.dim(t)
            n = t.shape[d]
            start = rng.randint(0, n)
            e = f"{name}.narrow({d}, {start}, {rng.randint(0, n - start)})"
        elif kind == "transpose":
            if nd <= 2 and rng.random() < 0.4:
                e = f"{name}.t()"
            elif nd:
                e = f"{name}.transpose({self.dim(t)}, {self.dim(t)})"
        elif kind == "mT" and nd >= 2:
            e = f"{name}.mT"
        elif kind == "permute" and nd:
            perm = list(range(nd))
            rng.shuffle(perm)
            e = f"{name}.permute({', '.join(map(str, perm))})"
        elif kind == "view":
            shape = self.reshape_to(t.numel())
            op = rng.choice(["view", "reshape", "reshape"])
            e = f"{name}.{op}({', '.join(map(str, shape)) if shape else '()'})"
        elif kind == "unsqueeze":
            d = rng.randint(-nd - 1, nd)
            e = f"{name}.unsqueeze({d})"
        elif kind == "squeeze":
            ones = [d for d in range(nd) if t.shape[d] == 1]
            if ones and rng.random() < 0.6:
                e = f"{name}.squeeze({rng.choice(ones)})"
            else:
                e = f"{name}.squeeze()"
        elif kind == "expand":
            lead = [rng.randint(1, 3) for _ in range(rng.choice([0, 0, 1, 2]))]
            body = [(rng.randint(1, 4) if n == 1 else rng.choice([n, -1])) for n in t.shape]
            shape = lead + body
            e = f"{name}.expand({', '.join(map(str, shape)) if shape else '()'})"
            if t.dtype == torch.bool:
                tags = {"bool_expand"}
        elif kind == "diagonal" and nd >= 2:
            d1 = rng.randrange(nd)
            d2 = rng.choice([d for d in range(nd) if d != d1])
            off = rng.randint(-2, 2)
            e = f"{name}.diagonal({off}, {d1}, {d2})" if rng.random() < 0.7 else \
                f"{name}.diagonal()"
        elif kind == "unfold" and nd:
            d = self.dim(t)
            n = t.shape[d]
            if n:
                size = rng.randint(1, n)
                step = rng.randint(1, 3)
                e = f"{name}.unfold({d}, {size}, {step})"
                if step > size or (n - size) % step:
                    tags.add("unfold_uncovered")
                if permuted(t):
                    tags.add("unfold_of_permuted")
        elif kind == "as_strided":
            e = self.as_strided_text(name, t)
            if name not in self.inputs:
                # Lazy may have made it as a view where eager did not (t.t().reshape(-1), a
                # 1-D @ 2-D matmul).
                tags = {"as_strided_of_view"}
        elif kind == "flatten" and nd:
            s = rng.randrange(nd)
            e = f"{name}.flatten({s}, {rng.randrange(s, nd)})" if rng.random() < 0.6 else \
                f"{name}.flatten()"
        elif kind == "chunk" and nd:
            d = self.dim(t)
            e = f"{name}.chunk({rng.randint(1, 3)}, {d})[{rng.choice([0, -1])}]"
        elif kind == "unbind" and nd and 0 not in t.shape:
            d = self.dim(t)
            e = f"{name}.unbind({d})[{rng.randrange(t.shape[d])}]"
        elif kind == "detach":
            e = f"{name}.detach()"
        elif kind == "contiguous":
            e = f"{name}.contiguous()"
        if e is None:
            return None
        if kind in ("transpose", "permute", "mT"):
            tags.add("permuted")
        new = self.fresh()
        return Step(f"{new} = {e}", new=new, src=name, tags=frozenset(tags))

    def reshape_to(self, n):
        if n == 0:
            return self.rng.choice([(0,), (0, 2), (2, 0, 1)])
        factors = []
        m, p = n, 2
        while m > 1:
            while m % p == 0:
                factors.append(p)
                m //= p
            p += 1
        bins = [1] * self.rng.randint(1, 4)
        for f in factors:
            bins[self.rng.randrange(len(bins))] *= f
        if self.rng.random() < 0.3:
            bins[self.rng.randrange(len(bins))] = -1
        return tuple(bins)

    def as_strided_text(self, name, t):
        rng = self.rng
        storage_n = t.untyped_storage().nbytes() // t.element_size()
        if storage_n == 0:
            return None
        if not KNOWN_BUGS and not (t.storage_offset() == 0 and t.is_contiguous()
                                   and t.numel() == storage_n):
            return None  # KNOWN_BUGS: as_strided of a view that does not span its storage
        for _ in range(5):
            nd = rng.randint(1, 3)
            sizes = [rng.randint(1, 4) for _ in range(nd)]
            order = list(range(nd))
            rng.shuffle(order)
            strides = [0] * nd
            cur = 1
            for d in order:
                strides[d] = cur
                cur *= sizes[d] * rng.choice([1, 1, 2])
            if rng.random() < (0.5 if OVERLAP else 0.25):  # maybe overlapping
                strides[rng.randrange(nd)] = rng.choice([0, 1])
            extent = sum((s - 1) * st for s, st in zip(sizes, strides)) + 1
            if extent <= storage_n:
                off = rng.randint(0, storage_n - extent)
                return f"{name}.as_strided({tuple(sizes)}, {tuple(strides)}, {off})"
        return None

    def inplace_step(self):
        rng = self.rng
        name = self.pick(writable=True)
        if name is None:
            return None
        t = self.t(name)
        kind = rng.choice(["add_", "sub_", "mul_", "div_", "copy_", "fill_", "zero_", "clamp_",
                           "masked_fill_", "index_add_", "index_copy_", "setitem", "setitem",
                           "setmask", "unary_", "out"])
        dest, dest_expr = t, name
        if kind == "setitem":
            dest_expr = f"{name}[{self.index_text(t)}]"
            try:
                dest = eval(dest_expr, self.ns)
            except Exception:  # noqa: BLE001
                dest = None  # an index error: eager raises
        must_raise = False

        def checked(expr, value):
            nonlocal must_raise
            # An operand on dest's memory is cloned, unless it is exactly dest: eager's overlap
            # checks compare strides, also those of one-element dims, which lazy does not give
            # as eager does for all results (KNOWN_BUGS: odd_unit_strides).
            if dest is not None and isinstance(value, torch.Tensor) and (
                    write_hazard(dest, value) or (shares_storage(dest, value) and (
                        kind in ("index_add_", "index_copy_", "masked_fill_", "out") or
                        _full_geometry(value) != _full_geometry(dest)))):
                if rng.random() < 0.2:
                    must_raise = True  # only kept if eager refuses it
                    return expr
                return f"({expr}).clone()" if not expr.isidentifier() else f"{expr}.clone()"
            if dest is not None and not castable(value, dest.dtype):
                return None
            return expr

        code = None
        if kind in ("add_", "sub_", "mul_", "div_", "copy_"):
            expr, value = self.operand(t.shape, scalar_ok=kind != "copy_")
            expr = checked(expr, value)
            if expr is None:
                return None
            alpha = f", alpha={self.scalar(t.dtype)}" if kind in ("add_", "sub_") and \
                rng.random() < 0.2 else ""
            code = f"{name}.{kind}({expr}{alpha})"
        elif kind == "fill_":
            code = f"{name}.fill_({self.scalar(t.dtype if rng.random() < 0.9 else None)})"
        elif kind == "zero_":
            code = f"{name}.zero_()"
        elif kind == "clamp_":
            lo = self.scalar(t.dtype)
            hi = self.scalar(t.dtype)
            lo, hi = (lo, hi) if rng.random() < 0.8 or not isinstance(lo, (int, float)) else \
                (min(lo, hi), max(lo, hi))
            code = rng.choice([f"{name}.clamp_({lo}, {hi})", f"{name}.clamp_(min={lo})",
                               f"{name}.clamp_(max={hi})"])
        elif kind == "masked_fill_":
            expr, value = self.operand(t.shape, scalar_ok=False)
            mask = f"{expr} > 0" if not isinstance(value, torch.Tensor) or \
                value.dtype != torch.bool else expr
            if isinstance(value, torch.Tensor) and shares_storage(t, value):
                mask = f"({mask}).clone()"
            code = f"{name}.masked_fill_({mask}, {self.scalar(t.dtype)})"
        elif kind in ("index_add_", "index_copy_") and t.dim():
            d = self.dim(t)
            n = t.shape[d]
            if n == 0:
                return None
            if kind == "index_copy_":
                idx = rng.sample(range(n), rng.randint(1, n))
            else:
                idx = [rng.randrange(n) for _ in range(rng.randint(1, n + 1))]
            shape = list(t.shape)
            shape[d] = len(idx)
            expr, value = self.operand(shape, dtype=t.dtype if rng.random() < 0.95 else None,
                                       exact=True, scalar_ok=False)
            expr = checked(expr, value)
            if expr is None:
                return None
            alpha = f", alpha={self.scalar(t.dtype)}" if kind == "index_add_" and \
                rng.random() < 0.2 else ""
            code = f"{name}.{kind}({d}, torch.tensor({idx}, device=DEV), {expr}{alpha})"
        elif kind == "setitem":
            if dest is not None:
                expr, value = self.operand(dest.shape)
                expr = checked(expr, value)
                if expr is None:
                    return None
            else:
                expr, value = "0", 0
            if isinstance(value, torch.Tensor) and value.dim() == 0 and dest is not None and \
                    shares_storage(dest, value) and not expr.endswith(".clone()"):
                # Not a lazyfuse bug: PyTorch's setitem fills from a 0-dim CPU tensor (no overlap
                # check) but copies from one on another device (checked: `t[None] = t` raises).
                expr = f"{expr}.clone()"
            code = f"{dest_expr} = {expr}"
        elif kind == "setmask":
            if not KNOWN_BUGS and (permuted(t) or "permuted" in self.tags.get(name, ())):
                return None  # KNOWN_BUGS: mask assignment into a permuted view
            expr, value = self.operand(t.shape, scalar_ok=False)
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(t.shape):
                mask = f"{name} > 0" if t.dtype != torch.bool else name
            else:
                mask = f"{expr} > 0" if value.dtype != torch.bool else expr
                if shares_storage(t, value):
                    mask = f"({mask}).clone()"
            code = f"{name}[{mask}] = {self.scalar(t.dtype)}"
        elif kind == "unary_":
            code = f"{name}.{rng.choice(['neg_', 'relu_', 'abs_', 'floor_', 'sigmoid_'])}()"
        elif kind == "out":
            # The exact shape: an out= tensor that eager resizes is known to differ
            # (test_views_mutation.py::test_out_view_resized_like_eager).
            expr, value = self.operand(t.shape, exact=True, scalar_ok=False, wild=False)
            expr = checked(expr, value)
            if expr is None:
                return None
            op = rng.choice(["add", "mul", "maximum"])
            other = self.scalar() if op != "maximum" else expr
            code = f"torch.{op}({expr}, {other}, out={name})"
        if code is None:
            return None
        return Step(code, overlap="overlap" in self.tags.get(name, ())), must_raise

    def pointwise_step(self):
        rng = self.rng
        a = self.pick()
        ta = self.t(a)
        new = self.fresh()
        if rng.random() < 0.35:
            unary = rng.choice(["{a}.neg()", "{a}.abs()", "{a}.exp()", "torch.sin({a})",
                                "torch.tanh({a})", "torch.sigmoid({a})", "{a}.relu()",
                                "{a}.abs().sqrt()", "{a}.float()", "{a}.double()", "{a}.long()",
                                "{a}.bool()", "torch.logical_not({a})", "{a}.clamp({lo}, {hi})",
                                "{a}.floor()", "{a}.sign()", "{a}.square()", "{a} * 1",
                                "{a}.clone()", "{a}.to(torch.int64)", "~{a}"])
            if ("long" in unary or "int64" in unary) and not castable(ta, torch.int64):
                return None
            e = unary.format(a=a, lo=self.scalar(), hi=self.scalar())
            return Step(f"{new} = {e}", new=new, loose_layout=odd_unit_strides(ta))
        r = rng.random()
        if r < 0.35:
            b = self.pick(lambda t: _broadcasts(t.shape, ta.shape))
            bexpr = b
        elif r < 0.75:
            bexpr, _ = self.operand(ta.shape, scalar_ok=False)
        else:
            bexpr = fmt_scalar(self.scalar())
        if bexpr is None:
            return None
        x, y = (a, bexpr) if rng.random() < 0.7 else (bexpr, a)
        tensors_only = bexpr[:1] == "t" or "(" in bexpr
        ops = ["{x} + {y}", "{x} - {y}", "{x} * {y}", "{x} / {y}", "{x} == {y}", "{x} < {y}",
               "{x} >= {y}", "torch.where({a} > 0, {x}, {y})", "{x} & {y}"]
        if x == a:
            ops.append("{x}.add({y}, alpha=2)")
        if KNOWN_BUGS:  # their results' strides
            ops += ["torch.logical_and({x}, {y})", "torch.logical_or({x}, {y})"]
        if tensors_only:
            ops += ["torch.maximum({x}, {y})", "torch.minimum({x}, {y})"]
        e = rng.choice(ops).format(x=x, y=y, a=a)
        tb = eval(bexpr, self.ns)
        return Step(f"{new} = {e}", new=new,
                    loose_layout=odd_unit_strides(ta) or odd_unit_strides(tb))

    def reduction_step(self):
        rng = self.rng
        a = self.pick()
        t = self.t(a)
        nd = t.dim()
        new = self.fresh()
        kind = rng.choice(["sum", "sum", "mean", "amax", "amin", "argmax", "softmax",
                           "log_softmax"])
        keep = rng.random() < 0.3
        if kind in ("softmax", "log_softmax"):
            d = self.dim(t) if nd else 0
            dt = ", dtype=torch.float64" if rng.random() < 0.15 else ""
            e = f"torch.{kind}({a}, {d}{dt})"
        elif kind == "argmax":
            if nd and rng.random() < 0.7:
                e = f"{a}.argmax({self.dim(t)}{', keepdim=True' if keep else ''})"
            else:
                e = f"{a}.argmax()"
        else:
            if nd == 0 or rng.random() < 0.25:
                e = f"{a}.{kind}()" if kind != "amax" and kind != "amin" else f"{a}.{kind}()"
            else:
                dims = rng.sample(range(nd), rng.randint(1, nd))
                if rng.random() < 0.2:
                    dims = [d - nd for d in dims]
                dims = f"({', '.join(map(str, dims))},)" if len(dims) > 1 or \
                    rng.random() < 0.3 else str(dims[0])
                e = f"{a}.{kind}({dims}{', keepdim=True' if keep else ''})"
        return Step(f"{new} = {e}", new=new)

    def matmul_step(self):
        rng = self.rng
        a = self.pick(lambda t: 1 <= t.dim() <= 3 and t.dtype != torch.bool)
        if a is None:
            return None
        t = self.t(a)
        new = self.fresh()
        if t.dim() >= 2 and rng.random() < 0.3:
            return Step(f"{new} = {a} @ {a}.mT", new=new)
        k = t.shape[-1]
        shape = (k,) if rng.random() < 0.2 else (k, rng.randint(1, 4))
        dtype = t.dtype if rng.random() < 0.9 else None
        bexpr, _ = self.operand(shape, dtype=dtype, exact=True, scalar_ok=False)
        if rng.random() < 0.2 and t.dim() == 2 and len(shape) == 2:
            return Step(f"{new} = torch.mm({a}, {bexpr})", new=new)
        return Step(f"{new} = {a} @ {bexpr}", new=new)

    def cat_step(self):
        a = self.pick(lambda t: t.dim() >= 1)
        if a is None:
            return None
        t = self.t(a)
        d = self.dim(t)
        shape = list(t.shape)
        shape[d] = self.rng.randint(0, 3)
        bexpr, _ = self.operand(shape, exact=True, scalar_ok=False)
        new = self.fresh()
        return Step(f"{new} = torch.cat([{a}, {bexpr}], {d})", new=new)

    def sync_step(self):
        rng = self.rng
        r = rng.random()
        full = rng.random() < 0.5
        if r < 0.4:
            return Step("lazyfuse.mark_step()", kind="mark_step", full_check=True)
        if r < 0.55:
            names = tuple(rng.sample(self.live(), min(len(self.live()), rng.randint(1, 2))))
            return Step(f"lazyfuse.sync({', '.join(names)})", kind="sync", names=names,
                        full_check=full)
        a = self.pick()
        t = self.t(a)
        if r < 0.75:
            expr = f"{a}.cpu()"
        else:
            expr = rng.choice([f"{a}.sum().item()", f"{a}.amax().item()",
                               f"{a}.double().mean().item()"])
            if t.numel() == 1 and rng.random() < 0.5:
                expr = f"{a}.item()"
            elif t.numel() and rng.random() < 0.3:
                expr = f"{a}.flatten()[{rng.randrange(t.numel())}].item()"
        return Step(f"_v = {expr}", kind="check", expr=expr, full_check=full)

    def del_step(self):
        names = [n for n in self.live() if n not in self.inputs]
        if not names:
            return None
        name = self.rng.choice(names)
        return Step(f"del {name}", kind="del")

    def generate(self):
        for _ in range(self.rng.randint(2, 4)):
            self.add(self.new_input())
        builders = [(self.view_step, 30), (self.inplace_step, 28), (self.pointwise_step, 18),
                    (self.reduction_step, 9), (self.matmul_step, 3), (self.cat_step, 2),
                    (self.sync_step, 8), (self.del_step, 3), (self.new_input, 1)]
        ops = 0
        attempts = 0
        while ops < self.n_ops and not self.ended and attempts < 20 * self.n_ops:
            attempts += 1
            if len(self.live()) > 14:
                step = self.del_step()
            else:
                builder = self.rng.choices([b for b, _ in builders],
                                           [w for _, w in builders])[0]
                step = builder()
            must_raise = False
            if isinstance(step, tuple):
                step, must_raise = step
            if step is None:
                continue
            if self.add(step, must_raise):
                ops += 1
        return self.program


def _broadcasts(a, b):
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False


def generate(seed, n_ops=STEPS):
    return Generator(seed, n_ops).generate()


# ---- running -------------------------------------------------------------------------------


class Mismatch(Exception):
    """Lazy differs from eager at a step: `category` names how (for reducing a program)."""

    def __init__(self, step, category, detail):
        super().__init__(f"step {step}: {category}: {detail}")
        self.step, self.category, self.detail = step, category, detail


def _geometry(t, view, layout=True):
    """What lazy must report as eager does: dtype, shape, contiguity, the strides of the dims of
    more than one element (those of the others come from heuristics and address nothing), and of
    a view its storage offset; of an empty tensor, only dtype and shape."""
    if t.numel() == 0:
        return (t.dtype, tuple(t.shape))
    if not layout:
        return (t.dtype, tuple(t.shape), t.storage_offset() if view else None)
    strides = tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))
    return (t.dtype, tuple(t.shape), strides, t.storage_offset() if view else None,
            t.is_contiguous())


def _full_geometry(t):
    return (t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.is_contiguous())


def _tolerances(t):
    # float64 values too may come from float32 ones (x.double()), whose rounding may differ by
    # the kernel's summation order (a matmul reading a transposed view).
    if t.dtype.is_floating_point:
        return dict(rtol=1e-5, atol=1e-5)
    return dict(rtol=0, atol=0)


def compare_tensor(i, what, lazy, eager, values=True, layout=True):
    if not isinstance(lazy, torch.Tensor) or lazy.device.type != "lazy":
        raise Mismatch(i, "not lazy", f"{what} is {type(lazy).__name__} "
                       f"{getattr(lazy, 'device', '')}")
    view = eager._is_view()
    if _geometry(lazy, view, layout) != _geometry(eager, view, layout):
        raise Mismatch(i, "geometry", f"{what}: lazy (dtype, shape, stride, offset, contiguous) "
                       f"{_full_geometry(lazy)}, eager {_full_geometry(eager)}"
                       f"{'' if view else ' (not a view)'}")
    if not values:
        return
    try:
        actual = lazy.cpu()
    except Exception as err:  # noqa: BLE001
        raise Mismatch(i, "lazy raised at sync",
                       f"{what}.cpu(): {type(err).__name__}: {err}") from None
    compare_values(i, what, actual, eager.cpu())


def compare_values(i, what, actual, expected):
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor) or actual.dtype != expected.dtype or \
                actual.shape != expected.shape:
            raise Mismatch(i, "value", f"{what}: lazy {actual!r}, eager {expected!r}")
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True, check_stride=False,
                                       **_tolerances(expected))
        except AssertionError as err:
            raise Mismatch(i, "value", f"{what}: {err}\nlazy:  {actual}\neager: {expected}") \
                from None
        return
    same = type(actual) is type(expected) and (
        actual == expected or (isinstance(expected, float) and (
            math.isclose(actual, expected, rel_tol=1e-5, abs_tol=1e-5) or
            (math.isnan(actual) and math.isnan(expected)))))
    if not same:
        raise Mismatch(i, "value", f"{what}: lazy {actual!r}, eager {expected!r}")


def compare_all(i, lazy_ns, eager_ns, loose):
    names = live_names(eager_ns)
    if live_names(lazy_ns) != names:
        raise Mismatch(i, "names", f"lazy {live_names(lazy_ns)}, eager {names}")
    for name in names:
        compare_tensor(i, name, lazy_ns[name], eager_ns[name], layout=name not in loose)


def _run(code, ns):
    try:
        exec(code, ns)
    except Exception as err:  # noqa: BLE001
        err.__traceback__ = None
        return err
    return None


def run_program(program, count=True):
    """Runs `program` eagerly (on the reference device) and on lazy in lockstep; raises
    Mismatch where they differ. Returns the number of steps run; `count`: adds them to STATS."""
    eager_ns, lazy_ns = namespace("cpu"), namespace("lazy")
    eager_ns["DEV"] = REFERENCE
    old_fusion = os.environ.get("LAZYFUSE_FUSION")
    os.environ["LAZYFUSE_FUSION"] = program.fusion
    steps = 0
    loose = set()  # names whose strides are not compared (Step.loose_layout)
    try:
        for i, step in enumerate(program.steps):
            steps += 1
            code = compile(step.code, f"<step {i}>", "exec")
            eager_err = _run(code, eager_ns)
            lazy_err = _run(code, lazy_ns)
            if eager_err is not None:
                STATS["raised"] += count
                if lazy_err is None:
                    try:
                        lazyfuse.mark_step()
                        for name in live_names(lazy_ns):
                            lazy_ns[name].cpu()
                    except Exception as err:  # noqa: BLE001
                        lazy_err = err
                        err.__traceback__ = None
                if lazy_err is None:
                    raise Mismatch(i, "lazy did not raise",
                                   f"eager raised {type(eager_err).__name__}: {eager_err}")
                if type(lazy_err) is not type(eager_err):
                    raise Mismatch(i, "exception type",
                                   f"eager raised {type(eager_err).__name__}: {eager_err}; "
                                   f"lazy {type(lazy_err).__name__}: {lazy_err}")
                return steps
            if lazy_err is not None:
                raise Mismatch(i, "lazy raised",
                               f"{type(lazy_err).__name__}: {lazy_err}")
            if step.new:
                # A tensor made from one of loose layout (a view, an elementwise result) may have
                # other strides too.
                if step.loose_layout or names_in(step.code) & loose:
                    loose.add(step.new)
                compare_tensor(i, step.new, lazy_ns[step.new], eager_ns[step.new], values=False,
                               layout=step.new not in loose)
            if step.kind in ("mark_step", "sync", "check"):
                STATS["syncs"] += count
            if step.kind == "check":
                actual, expected = lazy_ns["_v"], eager_ns["_v"]
                if isinstance(expected, torch.Tensor):
                    if actual.device.type != "cpu":
                        raise Mismatch(i, "value", f"{step.expr} is on {actual.device}")
                    compare_values(i, step.expr, actual, expected.cpu())
                else:
                    compare_values(i, step.expr, actual, expected)
            if step.kind == "sync":
                for name in step.names:
                    compare_tensor(i, name, lazy_ns[name], eager_ns[name],
                                   layout=name not in loose)
            if step.full_check:
                compare_all(i, lazy_ns, eager_ns, loose)
        compare_all(len(program.steps), lazy_ns, eager_ns, loose)
        return steps
    finally:
        STATS["steps"] += steps if count else 0
        eager_ns.clear()
        lazy_ns.clear()
        gc.collect()
        try:
            lazyfuse.mark_step()
        except Exception:  # noqa: BLE001 (a failed program's pending values)
            pass
        if old_fusion is None:
            os.environ.pop("LAZYFUSE_FUSION", None)
        else:
            os.environ["LAZYFUSE_FUSION"] = old_fusion


def failure_of(program, count=True):
    try:
        run_program(program, count)
    except Mismatch as m:
        return m
    return None


def reduce_program(program, failure, budget_s=60.0):
    """Drops steps while the program still fails the same way (same category)."""
    deadline = time.monotonic() + budget_s
    steps = list(program.steps)
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in reversed(range(len(steps))):
            if i >= len(steps) or time.monotonic() > deadline:
                continue
            trial = replace(program, steps=steps[:i] + steps[i + 1:])
            m = failure_of(trial, count=False)
            if m is not None and m.category == failure.category:
                steps, failure, changed = trial.steps, m, True
    return replace(program, steps=steps), failure


def check_seed(seed):
    """Generates and runs the program of `seed`; returns None, or a report of its failure."""
    program = generate(seed)
    STATS["programs"] += 1
    failure = failure_of(program)
    if failure is None:
        return None
    STATS["failed"] += 1
    report = [f"seed {seed}: {failure}", program.text(failure.step, failure.category)]
    if REDUCE:
        small, small_failure = reduce_program(program, failure)
        report = [f"seed {seed}: {failure}", "reduced:",
                  small.text(small_failure.step, small_failure.category),
                  f"reduced failure: {small_failure}"]
    return "\n".join(report)


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    start = time.monotonic()
    yield
    print(f"\nfuzz: {STATS['programs']} programs, {STATS['steps']} steps run "
          f"({STATS['syncs']} sync points, {STATS['raised']} programs ended by an eager error, "
          f"{STATS['failed']} failed) in {time.monotonic() - start:.1f} s"
          f"{' (with writes into overlapping views)' if OVERLAP else ''}")


@pytest.mark.skipif(LONG_PROGRAMS > 0, reason="LAZYFUSE_FUZZ_PROGRAMS runs the long mode instead")
@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_fuzz_fixed_seeds(seed):
    report = check_seed(seed)
    assert report is None, report


@pytest.mark.skipif(LONG_PROGRAMS == 0, reason="long mode: set LAZYFUSE_FUZZ_PROGRAMS=N")
def test_fuzz_long():
    failures = []
    for seed in range(LONG_START, LONG_START + LONG_PROGRAMS):
        report = check_seed(seed)
        if report is not None:
            print(f"\n==== FAILED {report}\n", flush=True)
            failures.append(seed)
    assert not failures, f"{len(failures)} failing seeds: {failures}"


def test_generator_is_deterministic():
    assert generate(12345).text() == generate(12345).text()

"""The fuzz generator: builds a program from a seed, step by step, against an eager shadow run
on the CPU that keeps its steps valid. Its bookkeeping (names, view tags, loose layouts) and
choices (tensors, shapes, scalars, operands, indices) are here, with inputs, syncs and
deletions; the step builders of each op family are mixins (fuzz_views, fuzz_writes,
fuzz_compute)."""

import random

import torch

from fuzz_compute import ComputeSteps
from fuzz_config import FIXED_FUSION, OVERLAP, STEPS, WRITE_EXCLUDED
from fuzz_program import Program, Step, fmt_scalar, live_names, names_in, namespace
from fuzz_tensors import numel_of, overlaps_itself, shares_storage
from fuzz_views import ViewSteps
from fuzz_writes import WriteSteps


class Generator(ViewSteps, WriteSteps, ComputeSteps):
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

    # -- step builders (those of views, writes and other ops are in the mixins) --

    def new_input(self):
        dtype = self.rng.choices([torch.float32, torch.float64, torch.int64, torch.bool],
                                 [50, 15, 20, 15])[0]
        name = self.fresh()
        code = f"{name} = inp({self.shape()}, {dtype}, {self.rng.randrange(1 << 20)}).to(DEV)"
        if self.rng.random() < 0.3:
            code += ".clone()"
        self.inputs.add(name)
        return Step(code, kind="input", new=name)

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


def generate(seed, n_ops=STEPS):
    return Generator(seed, n_ops).generate()

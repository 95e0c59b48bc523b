"""The fuzz generator's out-of-place steps: pointwise ops with broadcasting and dtype promotion,
reductions, matmul and cat (a mixin of fuzz_generator.Generator)."""

import torch

from fuzz_program import Step, fmt_scalar
from fuzz_tensors import castable, odd_unit_strides


class ComputeSteps:
    """Out-of-place op steps; they use Generator's bookkeeping and choices (self.pick,
    self.operand, ...)."""

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


def _broadcasts(a, b):
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False

"""The fuzz generator's in-place steps: add_, mul_, copy_, fill_, zero_, clamp_, masked_fill_,
index_add_, index_copy_, slice and mask assignment, out=, on views and bases, with operands that
may overlap what they write (a mixin of fuzz_generator.Generator)."""

import torch

from fuzz_program import Step
from fuzz_tensors import castable, full_geometry, shares_storage, write_hazard


class WriteSteps:
    """In-place steps; they use Generator's bookkeeping and choices (self.pick, self.operand,
    ...)."""

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
                        full_geometry(value) != full_geometry(dest)))):
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

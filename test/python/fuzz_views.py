"""The fuzz generator's view steps: slices with steps, select, narrow, transpose, permute,
view/reshape, unsqueeze/squeeze, expand, diagonal, unfold, as_strided, flatten, chunk, unbind
(a mixin of fuzz_generator.Generator)."""

import torch

from fuzz_config import OVERLAP
from fuzz_program import Step
from fuzz_tensors import permuted


class ViewSteps:
    """View steps; they use Generator's bookkeeping and choices (self.pick, self.fresh, ...)."""

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

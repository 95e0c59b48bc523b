"""CPU programs that never make a lazy tensor, for test_containment.py: run once with lazyfuse
loaded and once without, each prints what it computes and traces, and the two must agree
(Note [Lazy-only kernels on Functionalize]).

Run as `python containment_programs.py [names...]`; each program prints one block:
`== name` then its result, or the exception type and message it raised.
"""

import io
import pickle
import sys
import traceback
import warnings

import torch

PROGRAMS = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


def show(value):
    """A deterministic text of `value`: tensors with dtype, shape, strides and values."""
    if isinstance(value, torch.Tensor):
        v = value.detach()
        flags = f"{v.dtype} {tuple(v.shape)} {tuple(v.stride())} conj={v.is_conj()}"
        values = v.resolve_conj().resolve_neg()
        return f"tensor({flags}, {values.tolist()})"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return repr(value)


# ---- functions that write through views (the ones torch.compile failed on) ------------------


def write_column(x, y):
    x = x.clone()
    x[:, 1].copy_(y)
    return x


def write_diagonal(x, y):
    x = x.clone()
    x.diagonal().copy_(y)
    return x * 2


def write_transposed_row(x, y):
    x = x.clone()
    x.t()[0].add_(y)
    return x


def slice_assign(x, y):
    x = x.clone()
    x[1:3] = y[:2].unsqueeze(1)
    return x.sum(0)


def write_view_of_local(x, y):
    z = x * 1
    v = z.view(-1)
    v[::2].mul_(3)
    return z + y.sum()


def write_and_read_alias(x, y):
    a = x.clone()
    b = a[0]
    b.add_(1)
    return a, b * y[0]


VIEW_WRITES = [write_column, write_diagonal, write_transposed_row, slice_assign,
               write_view_of_local, write_and_read_alias]


def view_inputs():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(4, 4, generator=gen), torch.randn(4, generator=gen)


@program
def eager_view_writes():
    return [fn(*view_inputs()) for fn in VIEW_WRITES]


@program
def compile_aot_eager_view_writes():
    torch._dynamo.reset()
    return [torch.compile(fn, backend="aot_eager", fullgraph=True)(*view_inputs())
            for fn in VIEW_WRITES]


@program
def compile_inductor():
    torch._dynamo.reset()
    return torch.compile(write_column)(*view_inputs())


@program
def make_fx_real_fake_symbolic():
    from torch.fx.experimental.proxy_tensor import make_fx

    out = []
    for mode in ("real", "fake", "symbolic"):
        for fn in (write_column, write_diagonal, slice_assign):
            gm = make_fx(fn, tracing_mode=mode)(*view_inputs())
            out.append(f"{mode} {fn.__name__}:\n{gm.code.strip()}")
    return out


@program
def make_fx_functionalized():
    from torch.fx.experimental.proxy_tensor import make_fx

    out = []
    for fn in VIEW_WRITES:
        gm = make_fx(torch.func.functionalize(fn, remove="mutations_and_views"))(*view_inputs())
        out.append(gm.code.strip())
    return out


@program
def func_functionalize_ops():
    x, y = view_inputs()

    def copy_(a, b):
        a = a.clone()
        a.copy_(b)
        return a

    def view_clone_view_inplace(a):
        v = a.view(-1).clone().view(4, 4)
        v.add_(1)
        return v

    def polygamma_(a):
        a = a.clone()
        a.polygamma_(1)
        return a

    def masked_fill_(a):
        a = a.clone()
        a.masked_fill_(a > 0, 2.0)
        return a

    def out_variant(a):
        out = torch.empty(0)
        torch.add(a, 1, out=out)
        return out

    results = {}
    for name, fn, args in [("copy_", copy_, (x, y)), ("view_clone", view_clone_view_inplace, (x,)),
                           ("polygamma_", polygamma_, (x.abs() + 1,)),
                           ("masked_fill_", masked_fill_, (x,)), ("out", out_variant, (x,))]:
        try:
            results[name] = torch.func.functionalize(fn)(*args)
        except Exception as err:  # noqa: BLE001 (the error is the result compared)
            results[name] = f"{type(err).__name__}: {err}"
    return results


@program
def functional_views_of_cpu_tensors():
    """Views under C++ functionalization of CPU tensors: lazyfuse's kernels on every view op's
    Functionalize entry (Note [Addresses of lazy storages]) must leave their offsets, strides and
    data pointers as PyTorch makes them."""
    x, _ = view_inputs()
    out = []
    makers = [lambda a: a[1:], lambda a: a[1:][:, 1:], lambda a: a.t()[2:],
              lambda a: a[1].unsqueeze_(0), lambda a: a[1:].t_(), lambda a: a.view(-1)[2:],
              lambda a: a.t().reshape(-1)]
    for reapply in (False, True):
        t = torch._to_functional_tensor(x.clone())
        torch._enable_functionalization(reapply_views=reapply)
        try:
            for make in makers:
                v = make(t)
                out.append((tuple(v.shape), v.stride(), v.storage_offset(),
                            v.data_ptr() - t.data_ptr(), v.untyped_storage().nbytes()))
        finally:
            torch._disable_functionalization()
    return out


@program
def functionalize_under_inference_mode():
    x, _ = view_inputs()
    out = {}
    with torch.inference_mode():
        for name, fn in [("instance_norm", lambda a: torch.nn.functional.instance_norm(
                              a.view(1, 4, 4))),
                         ("square_", lambda a: a.clone().square_()),
                         ("linear", lambda a: torch.nn.functional.linear(a, a))]:
            try:
                out[name] = torch.func.functionalize(fn)(x)
            except Exception as err:  # noqa: BLE001
                out[name] = f"{type(err).__name__}: {err}"
    return out


@program
def functional_tensor_mode_conj():
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    x = torch.randn(3, dtype=torch.complex64, generator=torch.Generator().manual_seed(2))
    with FunctionalTensorMode():
        a = FunctionalTensor.to_functional(x.clone())
        b = a.conj()
        b.add_(1)
        out = torch._from_functional_tensor(a.elem)
    return out


@program
def func_transforms():
    x, y = view_inputs()

    def f(a):
        b = a.clone()
        b[0].mul_(2)
        return (b.sin() * y).sum()

    return {
        "grad": torch.func.grad(f)(x),
        "vmap": torch.func.vmap(lambda r: write_view_of_local(r.view(2, 2), r))(x),
        "jacrev": torch.func.jacrev(lambda a: write_column(a, y).sum(0))(x),
    }


@program
def export_module_with_buffer_update():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(4))

        def forward(self, x):
            self.count.add_(1)
            x[:, 0].copy_(self.count)
            return x * 2

    ep = torch.export.export(M(), (torch.ones(4, 4),))
    return [str(ep.graph_module.code).strip(), ep.module()(torch.ones(4, 4))]


@program
def serialization_and_numpy():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight  # tied
    model = model.to(torch.float64).to("cpu")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    t = torch.arange(6.0).view(2, 3).t()
    return [model[1].weight is model[0].weight, sorted(loaded), loaded["0.weight"],
            pickle.loads(pickle.dumps(t)), t.numpy().tolist(), type(t.numpy()).__name__]


@program
def optimizer_defaults():
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 3)) for _ in range(3)]
    opt = torch.optim.Adam(params, lr=0.1)
    for _ in range(2):
        loss = sum((p * p).sum() for p in params)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [params, opt.defaults["foreach"], _get_foreach_kernels_supported_devices()]


@program
def warnings_emitted():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.ones(3)
        x.expand(2, 3).sum()
        torch.func.functionalize(lambda a: a.clone().add_(1))(x)
        torch.nn.functional.dropout2d(torch.ones(2, 3, 4))
    return sorted(str(w.message) for w in caught)


def lazyfuse_loaded():
    return torch._C._dispatch_has_kernel_for_dispatch_key("aten::_to_copy", "Lazy")


def main(names):
    print(f"lazyfuse loaded: {lazyfuse_loaded()}", file=sys.stderr)
    for name in names or PROGRAMS:
        print(f"== {name}", flush=True)
        try:
            print(show(PROGRAMS[name]()))
        except Exception as err:  # noqa: BLE001 (the error is the result compared)
            last = traceback.extract_tb(err.__traceback__)[-1]
            print(f"raised {type(err).__name__}: {err} (at {last.name})")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])

"""Running the towers on a CPU without vLLM's compiled ops: what the CPU matrix needs around them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def define_missing_activation_ops() -> torch.library.Library:
    """Let towers with vLLM's activation CustomOps be built without `vllm._C`.

    `SiluAndMul`, `QuickGELU`, ... look up `torch.ops._C.<op>` in `__init__`
    on the CPU platform, and vLLM's compiled ops are not built here. Define
    the missing ones with the classes' own `forward_native` math; with
    `custom_ops=["none"]` the towers run `forward_native` and never call them.
    The ops live as long as the returned library.
    """
    import torch.nn.functional as F

    def halves(x):
        return x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]

    math = {
        "silu_and_mul": lambda x: F.silu(halves(x)[0]) * halves(x)[1],
        "mul_and_silu": lambda x: halves(x)[0] * F.silu(halves(x)[1]),
        "gelu_and_mul": lambda x: F.gelu(halves(x)[0]) * halves(x)[1],
        "gelu_tanh_and_mul": lambda x: F.gelu(halves(x)[0], approximate="tanh") * halves(x)[1],
        "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_quick": lambda x: x * torch.sigmoid(1.702 * x),
    }
    library = torch.library.Library("_C", "FRAGMENT")
    for name, fn in math.items():
        if hasattr(torch.ops._C, name):
            continue
        library.define(f"{name}(Tensor(a!) out, Tensor input) -> ()")

        def impl(out, x, fn=fn):
            out.copy_(fn(x))

        library.impl(name, impl, "CPU")
    return library


@contextlib.contextmanager
def cpu_shims() -> Iterator[None]:
    """The missing activation ops defined, and CUDA stream capture answered "no".

    A CPU-only torch raises instead of answering `is_current_stream_capturing`
    (MiniCPM-V's resampler asks before it grows its position cache); nothing
    is captured on a CPU.
    """
    library = define_missing_activation_ops()
    capturing = torch.cuda.is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = lambda: False
    try:
        yield
    finally:
        torch.cuda.is_current_stream_capturing = capturing
        del library

# Call 2 of gpu-run-2026-12-02c.txt: what torch 2.11 on the H200 offers, and hot-loop host costs.
#   bash .gpu/run.sh python3 .gpu/probe.py
import time

import torch

print(
    torch.__version__,
    "swap:",
    hasattr(torch.UntypedStorage, "_swap_data_ptr_"),
    "construct:",
    hasattr(torch._C, "_construct_storage_from_data_pointer"),
)
dev = torch.device("cuda")


def t(f, n=2000):
    for _ in range(50):
        f()
    s = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - s) / n * 1e6


ring = torch.empty(2 * 32 << 20, dtype=torch.uint8, device=dev)
params = [
    torch.nn.Parameter(torch.empty(1024, 1024, dtype=torch.bfloat16, device=dev), requires_grad=False)
    for _ in range(12)
]
st = ring.untyped_storage()


def bind():
    for i, p in enumerate(params):
        p.set_(st, i * (1 << 20), (1024, 1024), (1024, 1))


with torch.inference_mode():
    print("set_ x12 us", t(bind))
    if hasattr(torch.UntypedStorage, "_swap_data_ptr_"):
        a = torch._C._construct_storage_from_data_pointer(ring.data_ptr(), dev, 24 << 20)
        b = torch._C._construct_storage_from_data_pointer(ring.data_ptr() + (32 << 20), dev, 24 << 20)
        print("swap us", t(lambda: a._swap_data_ptr_(b)))
    host = torch.empty(32 << 20, dtype=torch.uint8).pin_memory()
    cs = torch.cuda.Stream()
    comp = torch.cuda.current_stream()
    dst = ring[: 32 << 20]
    ev = torch.cuda.Event()

    def copy_torch():
        torch.cuda.set_stream(cs)
        dst.copy_(host, non_blocking=True)
        torch.cuda.set_stream(comp)

    print("copy via set_stream+copy_ us", t(copy_torch, 300))
    torch.cuda.synchronize()
    print("event new+record us", t(lambda: torch.cuda.Event().record(cs)))
    print("event rerecord us", t(lambda: ev.record(cs)))
    print("wait_event us", t(lambda: comp.wait_event(ev)))
    print("slice us", t(lambda: ring[: 24 << 20]))
    torch.cuda.synchronize()

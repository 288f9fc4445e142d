"""The multimodal towers of vLLM 0.34.0, built and encoded the way their models do.

One entry per model family whose tower can be built from a config with random
weights. Each entry builds the children that the model class creates inside
`_mark_tower_model` (the same classes, prefixes and `quant_config=None`) from a
transformers (or vLLM) config, at one of two sizes:

- ``"tiny"``: a few small layers, for the CPU (tests/patches/test_tower_matrix_cpu.py);
- ``"full"``: the released model's tower dimensions, for the GPU
  (tests/gpu/test_tower_matrix.py, benchmarks/tower_matrix.py).

Encoding goes through the model class's own `_process_image_input` (or its
audio equivalent, or `embed_multimodal` where the class has no such method),
called on a *host*: a bare instance of the model class
(`__new__` + `nn.Module.__init__`, no language model) holding the towers and
the few attributes that method reads. So the forward path, casts and splits
are upstream's, not a copy of them.

The callers need a vLLM config context (`vllm_context`), a device and a dtype;
`build_family` returns the host with seeded random weights.

Modules: `core` (the entry, building, encoding, comparing, shared configs and
inputs), `measure` (one matrix row, the table), `cpu` (stand-ins for vLLM's
compiled ops the towers look up on a CPU), and the families by the inputs
their towers take: `grids` (patches + grid), `omni` (audio + vision),
`tiles` (fixed-size tiles), `pooling` (resamplers, pooling, visual tokens),
`native` (whole images), `audio`.
"""

from __future__ import annotations

from vllm_fork_testkit.tower_families import audio, grids, native, omni, pooling, tiles
from vllm_fork_testkit.tower_families.core import (
    FULL,
    TINY,
    NotBitIdentical,
    TowerFamily,
    bit_identical,
    build_family,
    build_on_meta,
    check_bit_identical,
    device_properties,
    encode,
    loader_defaults,
    make_inputs,
    max_abs_diff,
    seed_weights,
    streamable_parameters,
    towers_of,
    use_plain_cpu_linear,
    vllm_context,
)
from vllm_fork_testkit.tower_families.cpu import cpu_shims
from vllm_fork_testkit.tower_families.measure import (
    device_name,
    markdown_table,
    measure_family,
    param_bytes_on_device,
    release,
)

__all__ = [
    "FAMILIES",
    "FULL",
    "NotBitIdentical",
    "TINY",
    "TowerFamily",
    "bit_identical",
    "build_family",
    "build_on_meta",
    "check_bit_identical",
    "loader_defaults",
    "seed_weights",
    "cpu_shims",
    "device_name",
    "device_properties",
    "encode",
    "family",
    "select",
    "make_inputs",
    "markdown_table",
    "max_abs_diff",
    "measure_family",
    "param_bytes_on_device",
    "release",
    "streamable_parameters",
    "towers_of",
    "use_plain_cpu_linear",
    "vllm_context",
]

FAMILIES: list[TowerFamily] = [
    *grids.FAMILIES,
    *omni.FAMILIES,
    *tiles.FAMILIES,
    *pooling.FAMILIES,
    *native.FAMILIES,
    *audio.FAMILIES,
]


def family(name: str) -> TowerFamily:
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(name)


def select(names: str = "", shard: str = "1/1") -> list[TowerFamily]:
    """The families named (comma-separated; all if empty), then the K-th of N
    slices for `shard` "K/N" (so a full-size run can be split into calls that
    each end under a device's per-command time limit)."""
    families = list(FAMILIES) if not names else [family(name) for name in names.split(",")]
    index, count = (int(part) for part in shard.split("/"))
    if not 1 <= index <= count:
        raise ValueError(f"shard {shard!r}: K must be between 1 and N")
    return families[index - 1 :: count]

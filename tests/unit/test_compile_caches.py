"""The compile-cache reader (vllm_fork_testkit/compile_caches.py) on caches laid out as
Inductor leaves them: what the GPU tests compare between two engines' compiles."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from vllm_fork_testkit.compile_caches import (
    compile_key_differences,
    compiled_kernels,
    generated_deterministically,
    kernel_differences,
    used_compile_keys,
)


def kernel_source(kind: str, name: str, deterministic: bool = False) -> str:
    """A generated Triton kernel's file as Inductor writes it (its heads)."""
    meta = f"{{'grid_type': 'Grid1D', 'kernel_name': '{name}', 'deterministic': {deterministic}, 'num_load': 1}}"
    return (
        "import triton\nfrom torch._inductor.runtime import triton_heuristics\n\n"
        f"@triton_heuristics.{kind}(size_hints={{'x': 4096, 'r0_': 2048}}, filename=__file__,"
        f" inductor_meta={meta})\n"
        f"@triton.jit\ndef {name}(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):\n    pass\n"
    )


def test_two_compiles_kernels_and_chosen_configs_are_compared(tmp_path: Path):
    """compile_caches.compiled_kernels reads an engine's private caches as Inductor leaves them:
    generated kernels named by a hash of their text, each tuned kernel's choice where torch's
    own autotune cache writes it (written here by torch), wrapper modules and Triton's own
    cache left out. kernel_differences says where two compiles part in what they compute:
    a persistent reduction's warps, not a pointwise kernel's block size."""
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    def tuned(kernel: Path, warps: int, **kwargs) -> None:
        """What Inductor does once it has timed a kernel's configs on the device."""
        cache = AutotuneCache.create({"autotune_local_cache": True}, str(kernel), configs_hash="h")
        cache.save(SimpleNamespace(kwargs=kwargs, num_warps=warps, num_stages=1), time_taken_ns=warps * 10**6)

    def lay_out(root: Path, warps: int, xblock: int, extra_kernel: bool) -> dict:
        kernels = root / "vllm" / "torch_compile_cache" / "abc" / "rank_0_0" / "inductor_cache" / "x7"
        kernels.mkdir(parents=True)
        norm = kernels / "cx7rmsnorm.py"
        norm.write_text(kernel_source("persistent_reduction", "triton_per_fused_rms_norm_0"))
        tuned(norm, warps, XBLOCK=1)
        add = kernels / "cx7add.py"
        add.write_text(kernel_source("pointwise", "triton_poi_fused_add_1"))
        tuned(add, 4, XBLOCK=xblock)
        # The graph's wrapper module: its kernels' sources inline, and this cache's path.
        (kernels / "cwrapper.py").write_text(
            "async_compile = AsyncCompile()\n"
            f"# kernel path: {norm}\n"
            "triton_per_fused_rms_norm_0 = async_compile.triton('triton_per_fused_rms_norm_0', '''\n"
            + kernel_source("persistent_reduction", "triton_per_fused_rms_norm_0")
            + "''', device_str='cuda')\ndef call(args): ...\n"
        )
        if extra_kernel:
            (kernels / "cx7combo.py").write_text(kernel_source("reduction", "triton_red_fused_combo_2"))
        (root / "triton" / "TKEY").mkdir(parents=True)
        (root / "triton" / "TKEY" / "launcher.py").write_text("# triton's, not a generated kernel")
        return {"compiled_kernels": compiled_kernels(root)}

    first = lay_out(tmp_path / "a", warps=8, xblock=512, extra_kernel=False)
    assert first["compiled_kernels"] == {
        "sources": ["cx7add.py", "cx7rmsnorm.py"],
        "kinds": {"cx7add.py": "pointwise", "cx7rmsnorm.py": "persistent_reduction"},
        "configs": {
            "cx7add.py": {
                "XBLOCK": 512,
                "num_warps": 4,
                "num_stages": 1,
                "configs_hash": "h",
                "found_by_coordesc": False,
            },
            "cx7rmsnorm.py": {
                "XBLOCK": 1,
                "num_warps": 8,
                "num_stages": 1,
                "configs_hash": "h",
                "found_by_coordesc": False,
            },
        },
        "deterministic": {"cx7add.py": False, "cx7rmsnorm.py": False},
    }
    assert not generated_deterministically(first["compiled_kernels"])
    # Another pointwise block size: faster or slower, the same sums.
    same = lay_out(tmp_path / "b", warps=8, xblock=1024, extra_kernel=False)
    assert kernel_differences(first, same) == []
    other = lay_out(tmp_path / "c", warps=16, xblock=512, extra_kernel=True)
    assert kernel_differences(first, other) == [
        "0 kernel sources only in the first, 1 only in the second",
        "persistent_reduction kernel cx7rmsnorm.py chose another config: {'num_warps': (8, 16)}",
    ]


def test_the_mode_each_kernel_was_generated_in_is_read_from_its_source(tmp_path: Path):
    """Inductor writes `'deterministic': True` into a kernel's `inductor_meta` when it
    generated it in deterministic mode; a compile counts as deterministic only when every
    kernel it generated says so, and a compile that generated nothing does not."""
    kernels = tmp_path / "inductor" / "ab"
    kernels.mkdir(parents=True)
    (kernels / "cabnorm.py").write_text(kernel_source("reduction", "triton_red_fused_0", deterministic=True))
    (kernels / "cabadd.py").write_text(kernel_source("pointwise", "triton_poi_fused_1", deterministic=True))
    found = compiled_kernels(tmp_path)
    assert found["deterministic"] == {"cabadd.py": True, "cabnorm.py": True}
    assert generated_deterministically(found)
    (kernels / "cabsum.py").write_text(kernel_source("reduction", "triton_red_fused_2", deterministic=False))
    assert not generated_deterministically(compiled_kernels(tmp_path))
    assert not generated_deterministically(compiled_kernels(tmp_path / "empty"))


def test_why_one_engine_did_not_load_anothers_compile(tmp_path: Path):
    """vLLM logs the compile cache directory each graph used and writes the factors it hashed
    there (`cache_key_factors.json`); two keys' differences name the factor: a config field,
    an environment variable, or a traced file whose text differs or that only one traced."""

    def compiled(name: str, offload: str, files: list[dict]) -> str:
        directory = tmp_path / "vllm" / "torch_compile_cache" / name / "rank_0_0" / "backbone"
        directory.mkdir(parents=True)
        factors = {
            "env": {"VLLM_USE_AOT_COMPILE": True},
            "config": {"offload_config": {"offload_backend": offload}, "model_config": {"dtype": "bfloat16"}},
            "code": {"files": files},
            "compiler": {"torch": "2.14.0"},
            "config_hash": name,
            "code_hash": name,
            "compiler_hash": "c",
        }
        (directory / "cache_key_factors.json").write_text(json.dumps(factors, indent=2, sort_keys=True))
        return f"(EngineCore pid=1) INFO [backends.py:1110] [backbone] Using cache directory: {directory} for vLLM's torch.compile\n"

    model = {"path": "/site/vllm/model_executor/models/qwen3.py", "hash": "q1"}
    resident_log = compiled("aaaa", "auto", [model])
    streamed_log = compiled(
        "bbbb",
        "prefetch",
        [{**model, "hash": "q2"}, {"path": "/site/vllm/model_executor/offloader/base.py", "hash": "b"}],
    )
    resident, streamed = used_compile_keys(resident_log * 2), used_compile_keys(streamed_log)
    assert len(resident) == 1 and next(iter(resident.values()))["config"]["model_config"] == {"dtype": "bfloat16"}
    assert compile_key_differences(next(iter(resident.values())), next(iter(streamed.values()))) == [
        "code.files[/site/vllm/model_executor/models/qwen3.py]: 'q1' != 'q2'",
        "code.files[/site/vllm/model_executor/offloader/base.py]: '(absent)' != 'b'",
        "config.offload_config.offload_backend: 'auto' != 'prefetch'",
    ]
    same = next(iter(resident.values()))
    assert compile_key_differences(same, same) == []
    assert used_compile_keys("no such line") == {}


def test_a_float_and_an_int_of_one_value_are_different_keys():
    """vLLM hashes the factors' JSON, where 0.0 and 0 differ though they compare equal: the
    factor that kept a streamed engine from loading the resident engine's compile on the real
    wheel (gpu-real 2026-12-05e; patch 6 now gives both engines 0.0)."""

    def key(cpu_offload_gb: float) -> dict:
        uva = ["vllm.config.offload.UVAOffloadConfig", [["cpu_offload_gb", cpu_offload_gb], ["cpu_offload_params", []]]]
        return {"config": {"offload": {"offload_backend": "auto", "uva": uva}}, "config_hash": str(cpu_offload_gb)}

    resident, streamed = key(0.0), key(0)
    assert resident["config"] == streamed["config"]  # what a comparison with == sees
    differ = compile_key_differences(resident, streamed)
    assert len(differ) == 1 and differ[0].startswith("config.offload.uva: ")
    assert "['cpu_offload_gb', 0.0]" in differ[0] and "['cpu_offload_gb', 0]" in differ[0]

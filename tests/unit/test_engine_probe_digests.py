"""The engine probe's recorders (vllm_fork_testkit/engine_probe.py) on a small model on the
CPU: what the GPU engine tests compare between resident and streamed engines."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from vllm_fork_testkit import engine_compare, engine_probe
from vllm_fork_testkit.compile_caches import compiled_kernels, kernel_differences


class Decoder(torch.nn.Module):
    """A decoder as vLLM's runner calls it: input embeddings as a keyword, and Qwen3-VL's
    deepstack buffers, filled before the forward, as an attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.deepstack_input_embeds = [torch.zeros(16, 4), torch.zeros(16, 4)]

    def forward(self, input_ids=None, positions=None, inputs_embeds=None):
        return inputs_embeds * 2


def worker_of(model: torch.nn.Module, cache=None) -> SimpleNamespace:
    return SimpleNamespace(model_runner=SimpleNamespace(get_model=lambda: model, encoder_cache=cache))


def test_the_decoders_inputs_are_digested_per_forward_and_the_hook_removed():
    model = Decoder()
    worker = worker_of(model)
    assert engine_probe._start_recording_inputs(worker)
    first = torch.arange(12.0).reshape(3, 4)
    model.deepstack_input_embeds[1][:3] = 1.0
    out = model(positions=None, inputs_embeds=first)
    assert torch.equal(out, first * 2)
    second = first.clone()
    second[2, 0] += 1
    model(inputs_embeds=second)
    steps = engine_probe._recorded_inputs(worker)
    assert "forward" not in vars(model)  # the class's forward again
    assert [sorted(s) for s in steps] == [["deepstack_0", "deepstack_1", "inputs_embeds"]] * 2
    assert steps[0]["inputs_embeds"]["shape"] == [3, 4]
    assert steps[0]["deepstack_1"]["row_sums"] == [4.0, 4.0, 4.0]  # the first 3 rows only
    a, b = steps[0]["inputs_embeds"], steps[1]["inputs_embeds"]
    assert a["sha256"] != b["sha256"]
    assert [i for i, (x, y) in enumerate(zip(a["row_sums"], b["row_sums"])) if x != y] == [2]


def test_stored_encoder_outputs_are_digested_again_from_their_memory():
    """A write into a stored output after it was stored shows in the second digest."""
    cache = SimpleNamespace(encoder_outputs={})
    worker = worker_of(Decoder(), cache)
    assert engine_probe._start_recording_embeddings(worker)
    stored = torch.ones(4, 2)
    cache.encoder_outputs["image-a"] = stored
    cache.encoder_outputs["image-b"] = torch.zeros(2, 2)
    assert engine_probe._redigest_embeddings(worker) == {
        k: engine_probe._tensor_digest(v) for k, v in [("image-a", stored), ("image-b", torch.zeros(2, 2))]
    }
    stored[3, 1] = 5.0  # written after it was stored
    again = engine_probe._redigest_embeddings(worker)
    digests = engine_probe._recorded_embeddings(worker)
    assert again["image-a"]["sha256"] != digests["image-a"]["sha256"]
    assert again["image-a"]["row_sums"][:3] == digests["image-a"]["row_sums"][:3]
    assert again["image-b"] == digests["image-b"]
    assert not isinstance(cache.encoder_outputs, engine_probe._RecordingOutputs)  # recording stopped


def test_the_gpu_tests_name_the_first_differing_row_and_stream():
    """engine_compare's comparisons of two engines' recordings, as the encoder-graph test
    reads them."""
    embeds = torch.arange(12.0).reshape(3, 4)
    changed = embeds.clone()
    changed[1, 2] = -1.0
    resident = {
        "compared_inputs": [
            {
                "inputs_embeds": engine_probe._tensor_digest(embeds),
                "stream": 7,
                "default_stream": 7,
                "tracked_stream": 7,
            }
        ],
        "embeddings": {"image-a": engine_probe._tensor_digest(embeds)},
        "embeddings_after_compared": {"image-a": engine_probe._tensor_digest(changed)},
    }
    streamed = {
        "compared_inputs": [
            {
                "inputs_embeds": engine_probe._tensor_digest(changed),
                "stream": 9,
                "default_stream": 3,
                "tracked_stream": 9,
            }
        ],
    }
    assert engine_compare.input_differences(resident, streamed) == [
        "forward 0: stream is the default stream in one engine only",
        "forward 0: tracked_stream is the default stream in one engine only",
        "forward 0: inputs_embeds [3, 4] differs from row 1",
    ]
    assert engine_compare.input_differences(resident, resident) == []
    assert engine_compare.stored_output_changes(resident) == ["image-a: from row 1"]


def kernel_source(kind: str, name: str) -> str:
    """A generated Triton kernel's file as Inductor writes it (its heads)."""
    return (
        "import triton\nfrom torch._inductor.runtime import triton_heuristics\n\n"
        f"@triton_heuristics.{kind}(size_hints={{'x': 4096, 'r0_': 2048}}, filename=__file__)\n"
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
    }
    # Another pointwise block size: faster or slower, the same sums.
    same = lay_out(tmp_path / "b", warps=8, xblock=1024, extra_kernel=False)
    assert kernel_differences(first, same) == []
    other = lay_out(tmp_path / "c", warps=16, xblock=512, extra_kernel=True)
    assert kernel_differences(first, other) == [
        "0 kernel sources only in the first, 1 only in the second",
        "persistent_reduction kernel cx7rmsnorm.py chose another config: {'num_warps': (8, 16)}",
    ]


def test_a_request_is_recorded_as_its_prompt_tokens_logprobs_and_greedy_tokens():
    """engine_probe.request_record on a finished request shaped as vLLM's `RequestOutput`:
    prompt logprobs map each position's candidates to `Logprob`s; the prompt's own token's
    is kept, the first position has none."""
    logprob = lambda value: SimpleNamespace(logprob=value)  # noqa: E731
    out = SimpleNamespace(
        prompt_token_ids=[5, 7, 9],
        prompt_logprobs=[None, {7: logprob(-0.5), 3: logprob(-0.1)}, {9: logprob(-2.0)}],
        outputs=[SimpleNamespace(token_ids=(11, 12))],
    )
    assert engine_probe.request_record(out) == {
        "prompt_tokens": 3,
        "tokens": [11, 12],
        "prompt_logprobs": [None, -0.5, -2.0],
    }

"""The engine probe's recorders (vllm_fork_testkit/engine_probe.py) on a small model on the
CPU: what the GPU engine tests compare between resident and streamed engines."""

from __future__ import annotations

import json
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


def test_two_compiles_kernels_and_chosen_configs_are_compared(tmp_path: Path):
    """compile_caches.compiled_kernels reads an engine's private caches as Inductor leaves them
    (kernel sources named by a hash of their text, each autotuned kernel's choice in a
    `.best_config` JSON beside it; Triton's own cache ignored), and kernel_differences says
    where two compiles part."""

    def lay_out(root: Path, warps: int, extra_kernel: bool) -> dict:
        kernels = root / "vllm" / "torch_compile_cache" / "abc" / "rank_0_0" / "inductor_cache" / "x7"
        kernels.mkdir(parents=True)
        (kernels / "cx7rmsnorm.py").write_text("# kernel")
        choice = {"XBLOCK": 1, "R0_BLOCK": 4096, "num_warps": warps, "num_stages": 1, "configs_hash": "h"}
        (kernels / "k3f9.best_config").write_text(
            json.dumps({**choice, "time_taken_ms": warps, "triton_cache_hash": str(warps)})
        )
        if extra_kernel:
            (kernels / "cx7combo.py").write_text("# combo kernel")
        (root / "triton" / "TKEY").mkdir(parents=True)
        (root / "triton" / "TKEY" / "launcher.py").write_text("# triton's, not a generated kernel")
        return {"compiled_kernels": compiled_kernels(root)}

    first = lay_out(tmp_path / "a", warps=8, extra_kernel=False)
    assert first["compiled_kernels"] == {
        "sources": ["cx7rmsnorm.py"],
        "configs": {"k3f9": {"XBLOCK": 1, "R0_BLOCK": 4096, "num_warps": 8, "num_stages": 1, "configs_hash": "h"}},
    }
    same = lay_out(tmp_path / "b", warps=8, extra_kernel=False)
    assert kernel_differences(first, same) == []  # the time each took is not a choice
    other = lay_out(tmp_path / "c", warps=16, extra_kernel=True)
    assert kernel_differences(first, other) == [
        "0 kernel sources only in the first, 1 only in the second",
        "kernel k3f9 chose another config: {'num_warps': (8, 16)}",
    ]

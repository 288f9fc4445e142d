"""The engine probe's recorders (vllm_fork_testkit/engine_probe.py) on a small model on the
CPU: what the GPU engine tests compare between resident and streamed engines."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from vllm_fork_testkit import engine_compare, engine_probe


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

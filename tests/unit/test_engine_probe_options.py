"""engine_probe's engine options: what the GPU tests ask vLLM's `LLM` for."""

from __future__ import annotations

from vllm_fork_testkit.engine_probe import with_deterministic_inductor


def test_deterministic_inductor_is_asked_through_vllms_compilation_config():
    """Inductor's deterministic mode goes into `inductor_compile_config`, which vLLM hands each
    compile as config patches, beside what the compilation config already holds (the encoder
    graphs' budgets), without changing the options it was given."""
    encoder_graphs = {"compilation_config": {"cudagraph_mm_encoder": True, "inductor_compile_config": {"a": 1}}}
    asked = with_deterministic_inductor(encoder_graphs)
    assert asked == {
        "compilation_config": {"cudagraph_mm_encoder": True, "inductor_compile_config": {"a": 1, "deterministic": True}}
    }
    assert encoder_graphs["compilation_config"]["inductor_compile_config"] == {"a": 1}
    # vLLM's defaults (no options): a compilation config of that one field.
    assert with_deterministic_inductor({}) == {
        "compilation_config": {"inductor_compile_config": {"deterministic": True}}
    }

"""How recorded engine runs are grouped and reported (vllm_fork_testkit.engine_compare), on
runs shaped as engine_probe.py writes them. The digest comparisons and the compile caches'
reading: test_engine_probe_digests.py."""

from __future__ import annotations

import gzip
import json

from vllm_fork_testkit import engine_compare

PROMPTS = [[1, 2, 3, 4], [5, 6]]


def engine(mode: str, logprobs: list[list[float | None]], **extra) -> dict:
    """An engine as engine_probe.py records one: the compared batch's requests."""
    compared = [
        {"prompt_tokens": len(tokens), "tokens": [9, 9], "prompt_logprobs": lps}
        for tokens, lps in zip(PROMPTS, logprobs, strict=True)
    ]
    return {"mode": mode, "compared": compared, **extra}


BASE = [[None, -1.0, -2.0, -3.0], [None, -0.5]]
#: The same but for one position of the first prompt, and from that position on.
ONE = [[None, -1.0, -2.0000002, -3.0], [None, -0.5]]
SUFFIX = [[None, -1.0, -2.0000002, -3.0000002], [None, -0.5]]


def test_logprob_differences_name_the_request_the_count_and_the_first_position():
    found = engine_compare.logprob_differences(engine("resident", BASE), engine("streamed", SUFFIX))
    assert found == ["compared 0: 2 of 4 prompt logprobs differ, the first at 2 (max 2e-07)"]
    assert engine_compare.logprob_differences(engine("resident", BASE), engine("streamed", BASE)) == []


def test_engines_are_grouped_by_their_prompt_logprobs():
    engines = {
        "resident": engine("resident", BASE, cudagraphs=True, startup_s=55.4),
        "streamed": engine("streamed", BASE, cudagraphs=True),
        "resident_again": engine("resident", ONE, cudagraphs=True),
        "streamed_graphs": engine("streamed", SUFFIX, encoder_cudagraphs=True),
        "resident_graphs": engine("resident", SUFFIX, encoder_cudagraphs=True),
    }
    assert engine_compare.logprob_classes(engines) == [
        ["resident", "streamed"],
        ["resident_again"],
        ["streamed_graphs", "resident_graphs"],
    ]
    table = engine_compare.report(engines)
    assert "| resident | 0 | 0 | 1 | 2 | 2 |" in table
    assert "- resident (resident, compiled, started in 55.4 s); streamed (streamed, compiled)" in table
    assert "streamed_graphs (streamed, compiled, encoder graphs)" in table
    # Where each class parts from the first: per request, how many positions and which.
    assert "- resident_again: compared 0: 1 of 4 (2)" in table
    assert "- streamed_graphs: compared 0: 2 of 4 (2, 3)" in table
    assert engine_compare.positions_apart(engines["resident"], engines["resident_graphs"], ["compared"], listed=1) == [
        "compared 0: 2 of 4 (from 2)"
    ]


def test_only_batches_every_engine_ran_with_the_same_prompts_are_compared():
    other_prompts = engine("streamed", BASE)
    other_prompts["compared"][1]["prompt_tokens"] = 3
    engines = {"a": engine("resident", BASE), "b": other_prompts, "c": engine("resident", ONE)}
    assert engine_compare.shared_batches(engines) == []
    # Nothing compared: nothing tells the engines apart.
    assert engine_compare.logprob_classes(engines) == [["a", "b", "c"]]
    assert "ran alike (none)" in engine_compare.report(engines)


def test_the_command_reads_recorded_runs_gzipped_or_not(tmp_path, capsys):
    first = tmp_path / "engine_a.json.gz"
    first.write_bytes(gzip.compress(json.dumps({"resident": engine("resident", BASE)}).encode()))
    second = tmp_path / "engine_b.json"
    # A multi-GPU run records its layout beside its engines: not an engine.
    second.write_text(json.dumps({"streamed": engine("streamed", ONE), "layout": {"name": "tp2", "tp": 2}}))
    assert engine_compare.main([str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert f"run 1: {first}" in out and "| 1.resident | 0 | 1 |" in out
    assert "2.layout" not in out and "ran alike (compared)" in out
    assert engine_compare.main([str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err

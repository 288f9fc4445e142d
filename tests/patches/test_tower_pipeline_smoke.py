"""benchmarks/tower_pipeline.py --smoke: issue 11's whole matrix on the CPU, tiny towers.

The command the H200 runs (benchmarks/gpu/README.md), minus the GPU: both
towers, every input shape, lookahead 1-3, the H2D floor, the profile, the JSON
and the Markdown, with vLLM's own `PrefetchOffloader` streaming real
`Qwen3_VisionTransformer` towers from the patched tree. On the CPU the
streamer copies synchronously and times mean nothing; what is checked is that
every case runs and every streamed output equals the resident one bit for bit.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
BENCHMARK = REPO / "benchmarks" / "tower_pipeline.py"

#: The CPU runs of the GPU benchmarks (their --smoke): on a CUDA platform vLLM registers its ViT
#: attention op for CUDA only, and there the benchmarks themselves run (without --smoke).
CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only: ViT attention op is CUDA-only here")

pytestmark = [CPU_ONLY]


@pytest.fixture(scope="module")
def smoke_run(vllm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("tower_pipeline")
    return run_smoke(vllm_tree, out)


def run_on_cpu(script: Path, tree: Path, *options: str) -> None:
    """A benchmark's command line with --smoke, against `tree`; it must succeed."""
    proc = subprocess.run(
        [sys.executable, str(script), "--smoke", *options],
        cwd=REPO,
        # This checkout's packages, not an older installed copy of them.
        env={**os.environ, "VLLM_FORK_TREE": str(tree), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def benchmark_module(name: str) -> ModuleType:
    """A script of benchmarks/ as a module (they import each other by name, from there)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def run_smoke(tree: Path, out: Path, *options: str) -> tuple[dict, str]:
    """tower_pipeline.py --smoke against `tree`; its JSON and Markdown."""
    run_on_cpu(BENCHMARK, tree, "--out-dir", str(out), *options)
    return json.loads((out / "tower_pipeline.json").read_text()), (out / "tower_pipeline.md").read_text()


def test_every_case_of_the_matrix_runs_bit_identically(smoke_run):
    report, markdown = smoke_run
    names = [c["name"] for c in report["cases"]]
    kinds = {c["kind"] for c in report["cases"]}
    single = sorted(c["name"] for c in report["cases"] if c["kind"] == "image")
    assert kinds == {"image", "batch", "video", "sequence"}
    assert sorted(single) == sorted(f"image-{n}" for n in (64, 256, 1024, 2223, 4096, 9000))
    batches = [c for c in report["cases"] if c["kind"] == "batch"]
    assert sorted(len(c["encodes"][0]) for c in batches) == [3, 8]
    videos = [c for c in report["cases"] if c["kind"] == "video"]
    assert sorted(c["encodes"][0][0][0] for c in videos) == [2, 8]  # temporal grid
    (sequence,) = [c for c in report["cases"] if c["kind"] == "sequence"]
    shapes = [json.dumps(e) for e in sequence["encodes"]]
    assert len(shapes) > 2 and all(a != b for a, b in zip(shapes, shapes[1:]))

    rows = report["rows"]
    expected = {(t, n, la) for t in ("2B", "8B") for n in names for la in (1, 2, 3)}
    assert {(r["tower"], r["case"], r["lookahead"]) for r in rows} == expected
    assert len(rows) == len(expected)
    assert all(r["status"] == "ok" for r in rows)
    assert all(r["bit_identical"] is True for r in rows)
    for r in rows:
        assert r["median_over_median_max_resident_floor"] == r["streamed_ms"] / r["max_resident_floor_ms"]
        assert r["median_over_median_resident"] == r["streamed_ms"] / r["resident_ms"]
        case = report["towers"][r["tower"]]["streamed"][str(r["lookahead"])]["cases"][r["case"]]
        rounds = list(zip(case["timing"]["times_ms"], case["resident_paired_timing"]["times_ms"]))
        # The ratios are the medians of each round's (a streamed and a resident encode back to back).
        assert r["streamed_over_resident"] == statistics.median(s / t for s, t in rounds)
        if r["case"] != "changing-shapes":
            assert r["max_resident_floor_ms"] == max(r["resident_ms"], r["floor_ms"])
            assert r["streamed_over_max_resident_floor"] == statistics.median(
                s / max(t, r["floor_ms"]) for s, t in rounds
            )
        else:  # each encode held to its own max(resident, floor): never below the run's
            assert r["max_resident_floor_ms"] >= max(r["resident_ms"], r["floor_ms"]) * (1 - 1e-9)
            highest = max(s / max(t, r["floor_ms"]) for s, t in rounds)
            assert 0 < r["streamed_over_max_resident_floor"] <= highest * (1 + 1e-9)
    for tower in report["towers"].values():
        assert tower["resident"]["changing-shapes"]["matches_single_encodes"] is True
        assert sorted(tower["streamed"]) == ["1", "2", "3"]
        for phase in tower["streamed"].values():
            assert phase["units"] > 1
            assert phase["ring_mib"] < phase["arena_mib"]
            per_unit = phase["h2d"]["per_unit_from_arena"]
            assert per_unit["copies"] == phase["units"] and phase["h2d"]["bytes"] > 0
            assert all(c["bit_identical_first_encode"] for c in phase["cases"].values())
            # The ratio's resident time is taken interleaved with the streamed runs.
            assert all(
                len(c["resident_paired_timing"]["times_ms"]) == c["timing"]["iters"] for c in phase["cases"].values()
            )
    paired = {
        (t, name, int(la)): c["resident_paired_ms"]
        for t, tower in report["towers"].items()
        for la, phase in tower["streamed"].items()
        for name, c in phase["cases"].items()
    }
    assert all(r["resident_ms"] == paired[(r["tower"], r["case"], r["lookahead"])] for r in rows)
    assert report["targets"]["bit_identical"] == len(rows)
    # Rows whose rounds ran at the resident phase's host speed, each against its own phase.
    alone = {
        (t, name): c["ms_per_encode"] for t, tower in report["towers"].items() for name, c in tower["resident"].items()
    }
    assert all(r["resident_alone_ms"] == alone[r["tower"], r["case"]] for r in rows)
    steady = sum(abs(r["resident_ms"] / r["resident_alone_ms"] - 1) <= 0.10 for r in rows)
    assert report["targets"]["host_steady"] == steady
    assert f"- the host at one speed: {steady} of {len(rows)} rows'" in markdown


def test_a_saved_run_is_taken_again_from_its_timings_alone(smoke_run, tmp_path: Path):
    """--reanalyze runs nothing: from a saved JSON's timings it writes the same rows and
    targets, and a Markdown that differs only in saying that it did."""
    report, markdown = smoke_run
    saved = tmp_path / "saved.json"
    # Rows and targets dropped from the input: they must come from the timings.
    saved.write_text(json.dumps({**report, "rows": [], "targets": {}}))
    out = tmp_path / "again"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARK), "--reanalyze", str(saved), "--out-dir", str(out)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    again = json.loads((out / "tower_pipeline.json").read_text())
    assert again["rows"] == report["rows"] and again["targets"] == report["targets"]
    assert again["reanalyzed"].endswith(f"--reanalyze {saved} --out-dir {out}")
    lines, lines_again = markdown.splitlines(), (out / "tower_pipeline.md").read_text().splitlines()
    differ = [i for i, (a, b) in enumerate(zip(lines, lines_again)) if a != b]
    assert len(lines) == len(lines_again) and len(differ) == 1
    assert lines_again[differ[0]].startswith(f"Command: `{report['command']}`; rows, ratios and targets taken again")


def test_the_profile_and_the_markdown_are_written(smoke_run):
    report, markdown = smoke_run
    profile = report["towers"]["2B"]["streamed"]["1"]["profile"]
    assert "error" not in profile, profile.get("traceback")
    assert profile["case"] == "image-64" and profile["encodes"] == 5
    assert profile["summary"]["streams"] == []  # the CPU has no device streams
    assert report["machine"]["device"] == "cpu" and report["smoke"] is True and report["complete"] is True
    assert "streamed / max(resident, floor)" in markdown
    assert "## Profile: 2B tower" in markdown
    assert markdown.count("| 2B | one image") == 6 and markdown.count("| 8B |") >= 11


def test_cases_past_the_time_budget_are_recorded_as_skipped(vllm_tree: Path, tmp_path: Path):
    """The H200 run's safety net: past --budget-s nothing more runs, and the results are still written."""
    report, markdown = run_smoke(
        vllm_tree, tmp_path, "--budget-s", "0", "--towers", "8B", "--lookaheads", "2", "--profile", "8B:image-64:2"
    )
    tower = report["towers"]["8B"]
    assert {r["status"] for r in tower["resident"].values()} == {"skipped"}
    assert {r["status"] for r in tower["streamed"]["2"]["cases"].values()} == {"skipped"}
    assert "profile" not in tower["streamed"]["2"]
    assert len(report["rows"]) == len(report["cases"]) and {r["status"] for r in report["rows"]} == {"skipped"}
    assert report["complete"] is True and report["targets"]["measured"] == 0
    assert f"{len(report['cases'])} rows skipped" in markdown


#: One tower at one lookahead, no profile: the smallest matrix run that still covers every case.
ONE_TOWER = ("--towers", "2B", "--lookaheads", "1", "--profile", "none")


def test_a_resident_budget_streams_fewer_bytes_bit_identically(vllm_tree: Path, tmp_path: Path):
    """--resident-gb: the first units stay resident, the rest stream, outputs unchanged."""
    full, _ = run_smoke(vllm_tree, tmp_path / "full", *ONE_TOWER)
    kept, markdown = run_smoke(
        vllm_tree,
        tmp_path / "kept",
        *ONE_TOWER,
        "--resident-gb",
        "0.0002",  # about 210 KB: a few of the tiny tower's first units
    )
    before, after = full["towers"]["2B"]["streamed"]["1"], kept["towers"]["2B"]["streamed"]["1"]
    # Without a budget only the units too small to stream (the mergers' norms) stay.
    assert 0 < before["kept_resident_mib"] < after["kept_resident_mib"]
    assert after["kept_resident_mib"] <= before["kept_resident_mib"] + 0.0002 * 1024
    assert after["units"] < before["units"]
    assert after["arena_mib"] < before["arena_mib"]
    assert all(r["status"] == "ok" and r["bit_identical"] is True for r in kept["rows"])
    assert kept["settings"]["resident_gb"] == 0.0002
    assert "offload_towers_resident_gb=0.0002" in markdown


def test_the_matrix_with_triton_vit_attention_keeps_cu_seqlens_on_the_device(vllm_tree: Path, tmp_path: Path):
    """--vit-attention TRITON_ATTN: the towers' metadata is the Triton backend's (cu_seqlens
    as a tensor for the device; on the CPU vLLM computes the attention with SDPA), every case
    bit-identical, the backend named in the JSON and the Markdown."""
    report, markdown = run_smoke(vllm_tree, tmp_path, *ONE_TOWER, "--vit-attention", "TRITON_ATTN")
    assert report["settings"]["vit_attention"] == "TRITON_ATTN"
    assert all(r["status"] == "ok" and r["bit_identical"] is True for r in report["rows"])
    assert "ViT attention: TRITON_ATTN." in markdown


def test_graph_benchmark_runs_every_path_on_the_cpu(vllm_tree: Path, tmp_path: Path) -> None:
    """benchmarks/tower_graph.py --smoke: both towers, every case at lookahead 1-3, eager
    stand-ins for the replays (the CPU has no graphs); one-sequence metadata computes what the
    eager encode does; the targets and the Markdown again from the JSON alone."""
    run_on_cpu(REPO / "benchmarks" / "tower_graph.py", vllm_tree, "--out-dir", str(tmp_path))
    report = json.loads((tmp_path / "tower_graph.json").read_text())
    assert report["smoke"] is True and sorted(report["towers"]) == ["2B", "8B"]
    for data in report["towers"].values():
        # Triton's ViT attention (the default) takes cu_seqlens on the device: every case
        # of the matrix, batches and videos too, and a run of shapes (a graph per shape).
        assert [r["case"] for r in data["rows"]] == [
            *(f"image-{n}" for n in (64, 256, 1024, 2223, 4096, 9000)),
            "batch-3",
            "batch-8",
            "video-2",
            "video-8",
            "changing-shapes",
        ]
        for row in data["rows"]:
            assert row["bit_identical_to_resident_graph"] is True
            assert row["resident_graph_equals_eager"] is True
            assert row["streamed_over_max_resident_floor"] > 0
            # One streamed tower per lookahead; the table's columns are the best one's.
            assert sorted(row["streamed"]) == ["1", "2", "3"]
            assert all(s["max_abs_diff_to_resident_graph"] == 0.0 for s in row["streamed"].values())
            best = row["streamed"][str(row["best_lookahead"])]
            assert row["streamed_over_max_resident_floor"] == best["over_max_resident_floor"]
            assert row["eager_md_equals_eager"] is True and row["resident_replays_repeat"] is True
            for streamed in row["streamed"].values():
                # What each capture saw the streamer do: every unit from the ring (but the
                # position table, read outside its forward and onloaded at the start), its
                # copy issued ahead (the order learned by the eager run before), none alone.
                capture = streamed["capture"]
                assert capture["tables"] == row["encodes"], capture
                assert capture["ring_units"] + capture["tables"] == row["encodes"] * data["units"], capture
                assert capture["copy_not_ahead"] == 0 and capture["alone"] == 0, capture
                assert streamed["captured_on_a_copy_stream"] is False  # no streams on the CPU
        sequence = data["rows"][-1]
        assert sequence["encodes"] == 6 and sequence["floor_ms"] == 6 * data["rows"][0]["floor_ms"]
    markdown = (tmp_path / "tower_graph.md").read_text()
    assert "Smoke run" in markdown
    # Every lookahead of every row, and issue 11's targets over all of them.
    assert "## Lookahead 1/2/3" in markdown
    targets = report["targets"]
    assert targets["measured"] == targets["rows"] == 3 * 11 * 2 and targets["bit_identical"] == 66
    assert "bit-identical to resident: 66 of 66" in markdown
    # And over the rows a deployment gets: vLLM's default lookahead for towers.
    at_default = report["targets_at_default_lookahead"]
    assert at_default["measured"] == 22 and at_default["8B_image_2223_lookahead"] == 2
    assert "## Issue 11's targets at vLLM's default lookahead for towers (2," in markdown
    # The Markdown and targets again from the JSON alone, as a committed run is re-read.
    again = tmp_path / "again"
    run_on_cpu(
        REPO / "benchmarks" / "tower_graph.py",
        vllm_tree,
        "--reanalyze",
        str(tmp_path / "tower_graph.json"),
        "--out-dir",
        str(again),
    )
    reread = (again / "tower_graph.md").read_text()
    assert "taken again from its JSON" in reread
    assert reread.split("\n")[3:] == markdown.split("\n")[3:]


def test_the_benchmarks_default_lookahead_is_vllms(vllm_tree: Path) -> None:
    """The benchmarks' targets at the default lookahead are taken on the rows of vLLM's
    default for towers (the streamer patch), not on a number of their own."""
    from vllm.config.offload import PrefetchOffloadConfig

    tower_pipeline = benchmark_module("tower_pipeline")
    assert PrefetchOffloadConfig().towers_lookahead == tower_pipeline.DEFAULT_LOOKAHEAD


def test_a_run_of_encodes_is_copy_bound_only_when_every_encode_is() -> None:
    """`bound_kind`: a run whose encodes differ is "mixed" (held to the ratio, not to the
    link's bandwidth); a single encode is what its larger time says."""
    tower_pipeline = benchmark_module("tower_pipeline")
    bound_kind, perfect_stream_ms = tower_pipeline.bound_kind, tower_pipeline.perfect_stream_ms
    floor = 15.0
    assert bound_kind(1, 2.0, floor, max(2.0, floor)) == "copy"
    assert bound_kind(1, 48.0, floor, 48.0) == "compute"
    small = [2.0, 3.4, 7.6]
    assert bound_kind(3, sum(small), 3 * floor, perfect_stream_ms(small, floor)) == "copy"
    large = [48.0, 121.0]
    assert bound_kind(2, sum(large), 2 * floor, perfect_stream_ms(large, floor)) == "compute"
    # 2B changing-shapes on the H200 (2026-12-03c): resident 88.25 ms in all, under its
    # six copies' 89.05 ms, yet one encode (2223 tokens, 47.6 ms) is compute-bound.
    shapes = [2.0, 47.6, 3.4, 14.1, 13.6, 7.6]
    ideal = perfect_stream_ms(shapes, 14.84)
    assert sum(shapes) < 6 * 14.84 < ideal
    assert bound_kind(6, sum(shapes), 6 * 14.84, ideal) == "mixed"


def test_graph_benchmark_profiles_a_chosen_case_and_holds_each_encode_to_its_own_bound(
    vllm_tree: Path, tmp_path: Path
) -> None:
    """`--cases` runs only those; `--profile CASE:LOOKAHEAD` keeps a trace of one replay of the
    resident and the streamed graphs (no device events on the CPU). A run of encodes is held
    to the sum of each encode's max(resident, floor), which is at least its copies' floor."""
    run_on_cpu(
        REPO / "benchmarks" / "tower_graph.py",
        vllm_tree,
        *("--towers", "2B", "--lookaheads", "1", "--cases", "image-64,changing-shapes"),
        *("--profile", "changing-shapes:1", "--out-dir", str(tmp_path)),
    )
    report = json.loads((tmp_path / "tower_graph.json").read_text())
    single, sequence = report["towers"]["2B"]["rows"]
    assert (single["case"], sequence["case"]) == ("image-64", "changing-shapes")
    assert "profile" not in single
    for row in (single, sequence):  # the link checked again right after each case
        assert row["link_after"]["median_ms"] > 0 and isinstance(row["link_drift"], bool)
    assert single["max_resident_floor_ms"] == max(single["resident_graph"]["median_ms"], single["floor_ms"])
    assert sequence["max_resident_floor_ms"] >= sequence["floor_ms"]
    assert sequence["streamed_over_max_resident_floor"] == (
        sequence["streamed_graph"]["median_ms"] / sequence["max_resident_floor_ms"]
    )
    profile = sequence["profile"]
    assert profile["lookahead"] == 1
    for name in ("resident", "streamed"):
        assert "error" not in profile[name], profile[name]
        assert (tmp_path / profile[name]["trace"]).is_file()
    assert "## Profile: 2B changing-shapes, lookahead 1" in (tmp_path / "tower_graph.md").read_text()


def test_graph_benchmark_with_sdpa_runs_single_images_without_cu_seqlens(vllm_tree: Path, tmp_path: Path) -> None:
    """With SDPA's host split sizes a capture is refused (the cu_seqlens patch): the benchmark holds
    to single images, one sequence each, no cu_seqlens; same outputs as the eager encode."""
    run_on_cpu(
        REPO / "benchmarks" / "tower_graph.py",
        vllm_tree,
        "--vit-attention",
        "TORCH_SDPA",
        "--towers",
        "2B",
        "--lookaheads",
        "1",
        "--out-dir",
        str(tmp_path),
    )
    report = json.loads((tmp_path / "tower_graph.json").read_text())
    assert report["vit_attention"] == "TORCH_SDPA"
    rows = report["towers"]["2B"]["rows"]
    assert [r["case"] for r in rows] == [f"image-{n}" for n in (64, 256, 1024, 2223)]
    assert all(r["bit_identical_to_resident_graph"] and r["resident_graph_equals_eager"] for r in rows)
    assert "ViT attention TORCH_SDPA" in (tmp_path / "tower_graph.md").read_text()

"""What the README, the docs and the benchmarks' READMEs cite exists; benchmarks/ stays the
product's benchmarks (no imports from tests/, no sys.path edits) and its results stay small:
the whole working tree is carried to the GPU machine with every call (64 MiB at most)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").rglob("*.md")])
RESULTS = ROOT / "benchmarks" / "results"
RESULTS_MAX_BYTES = 3 * 1024 * 1024
RESULTS_MAX_FILES = 120

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path of this checkout in backticks. Paths in vLLM's tree look alike (`tests/config/`,
# `requirements/build/`, `docs/configuration/`): only this checkout's own folders count.
OWN_FOLDERS = r"(?:benchmarks|scripts|vllm_fork|vllm_fork_testkit|patches|ops-cache|tests/(?:unit|integration|patches|gpu|support)|docs/[\w.-]+\.md)"
TICKED = re.compile(r"`(" + OWN_FOLDERS + r"(?:/[^`\s]*)?)`")
# Placeholders and patterns, not paths: <date>, *.json, {md,json}, $OUT.
NOT_A_PATH = re.compile(r"[<>*{}$]")


def cited_paths(doc: Path) -> list[tuple[str, Path]]:
    text = doc.read_text()
    cited = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, or an anchor in the same file
        cited.append((target, (doc.parent / target.split("#")[0]).resolve()))
    for path in TICKED.findall(text):
        if not NOT_A_PATH.search(path):
            cited.append((path, ROOT / path.split("#")[0].split("::")[0].rstrip(".,:;")))
    return cited


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_path_exists(doc: Path):
    missing = [cited for cited, path in cited_paths(doc) if not path.exists()]
    assert missing == [], f"{doc.relative_to(ROOT)} cites paths that do not exist: {missing}"


def test_no_benchmark_imports_from_tests_or_edits_sys_path():
    offenders = []
    for path in sorted((ROOT / "benchmarks").rglob("*")):
        if path.suffix not in (".py", ".sh") or RESULTS in path.parents:
            continue
        text = path.read_text()
        if re.search(r"^\s*(from|import)\s+(tests|support|tower_families|vlm_checkpoint)\b", text, re.M):
            offenders.append(f"{path.relative_to(ROOT)}: imports test code")
        if "sys.path" in text:
            offenders.append(f"{path.relative_to(ROOT)}: touches sys.path")
    assert offenders == []


def test_results_stay_small():
    files = [p for p in RESULTS.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    assert len(files) <= RESULTS_MAX_FILES, f"benchmarks/results holds {len(files)} files (at most {RESULTS_MAX_FILES})"
    assert size <= RESULTS_MAX_BYTES, f"benchmarks/results holds {size / 2**20:.1f} MiB (at most 3 MiB)"


def test_the_pictures_draw_from_the_committed_results(tmp_path: Path):
    """benchmarks/plots.py --smoke: every picture still draws from the results' current format."""
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plots.py"), "--smoke", "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    drawn = sorted(p.name for p in tmp_path.glob("*.png"))
    assert drawn == sorted(p.name for p in RESULTS.glob("*.png")) and len(drawn) == 5

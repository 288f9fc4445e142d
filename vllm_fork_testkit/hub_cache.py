"""A checkpoint made on the spot, laid out in a Hugging Face cache under a Hub repo id.

vLLM's own tests name their models by repo id (`Qwen/Qwen3-VL-8B-Instruct`); the GPU
machine cannot reach the Hub. With `HF_HUB_OFFLINE=1` and `HF_HOME` pointing here,
`huggingface_hub` resolves the id to this snapshot as it would a download, so such a
test runs unchanged with `load_format="dummy"` on the checkpoint `vlm_checkpoint`
writes. Usage: `python -m vllm_fork_testkit.hub_cache HF_HOME REPO_ID FAMILY`.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from vllm_fork_testkit.vlm_checkpoint import make_checkpoint


def snapshot_dir(hf_home: Path, repo_id: str) -> Path:
    """Write `refs/main` of `repo_id` in `hf_home`'s hub cache and return its snapshot folder."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    revision = hashlib.sha1(repo_id.encode()).hexdigest()  # any 40 hex digits name a snapshot
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision


def cache_checkpoint(hf_home: Path, repo_id: str, family: str) -> Path:
    """Make a `family` checkpoint (no weights) as `repo_id`'s snapshot in `hf_home`; return it."""
    return make_checkpoint(family, snapshot_dir(hf_home, repo_id))


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    hf_home, repo_id, family = argv
    print(cache_checkpoint(Path(hf_home), repo_id, family))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""What `invoke check` keeps between runs, in the cache directory, keyed on content.

Two levels, both keyed on the analysis's own version (the bytes of the code that
computes it, the Python that runs it, the git that applies the patches):

- the queue's tree result (what applying, exporting and analysing the queue found),
  keyed on the upstream commit and the bytes of every file in patches/: when nothing
  changed, `check` neither applies the queue nor analyses it;
- each file's analysis (undefined names, imports, top-level bindings, private names),
  keyed on the file's text: when one patch changed, only the files whose text is new
  are analysed again.

Every file is written atomically (a reader sees the old file or the new one); a
cache file that cannot be read is a miss, and one that cannot be written is skipped:
neither is an error.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_fork.core import log
from vllm_fork.core.fs import write_atomic
from vllm_fork.core.paths import cache_subdir

#: The cache's folder (under the cache directory).
CACHE_NAME = "check"
#: Tree results kept (one per queue state checked); the oldest go first.
KEEP_RESULTS = 64
#: File analyses kept once the memo grows past this: only those the last run used stay.
MAX_MEMO_ENTRIES = 20000
#: Memo files kept (one per analysis version: worktrees running other code share the cache).
KEEP_MEMOS = 4

_QUEUE_CODE = Path(__file__).resolve().parent
_GIT_CODE = _QUEUE_CODE.parent / "core" / "git.py"


@functools.cache
def analysis_version() -> str:
    """A digest of what decides the analysis besides its inputs: the queue code, git.py,
    the Python version (ast, symtable) and the git version (am, format-patch)."""
    digest = hashlib.sha256()
    for path in [*sorted(_QUEUE_CODE.glob("*.py")), _GIT_CODE]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(sys.version.encode())
    proc = subprocess.run(["git", "--version"], capture_output=True, check=False)
    digest.update(proc.stdout)
    return digest.hexdigest()


def queue_key(upstream_commit: str, tag: str, patches_dir: Path) -> str:
    """The tree result's key: the analysis version, the upstream commit and every file in patches/."""
    digest = hashlib.sha256(f"{analysis_version()}\0{upstream_commit}\0{tag}\0".encode())
    for path in sorted(p for p in patches_dir.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _folder() -> Path:
    return cache_subdir(CACHE_NAME)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def load_result(key: str) -> dict[str, Any] | None:
    """The tree result stored for `key`, or None."""
    data = _read_json(_folder() / f"{key}.json")
    return data if isinstance(data, dict) and data.get("key") == key else None


def store_result(key: str, result: dict[str, Any]) -> None:
    """Keep `result` for `key`; a cache that cannot be written (read-only, full) only costs speed."""
    folder = _folder()
    try:
        write_atomic(folder / f"{key}.json", json.dumps({"key": key, **result}, sort_keys=True))
        _prune(folder, "[0-9a-f]*.json", KEEP_RESULTS)
    except OSError as exc:
        log.detail(f"check: not cached ({exc})")


def _prune(folder: Path, pattern: str, keep: int) -> None:
    def age(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    for old in sorted(folder.glob(pattern), key=age, reverse=True)[keep:]:
        old.unlink(missing_ok=True)


def text_digest(source: str) -> str:
    return hashlib.sha1(source.encode("utf-8", "surrogateescape")).hexdigest()


class Memo:
    """Results of pure functions of a file's text, kept across runs when `persist` is set.

    `get(kind, source, extra, compute)`: the stored value for (kind, the text's digest, extra),
    else `compute()`'s (a JSON value), stored. `save()` writes what changed.
    """

    def __init__(self, persist: bool = False) -> None:
        self.path = _folder() / f"memo-{analysis_version()[:32]}.json" if persist else None
        loaded = _read_json(self.path) if self.path else None
        self.entries: dict[str, Any] = loaded if isinstance(loaded, dict) else {}
        self.used: set[str] = set()
        self.changed = False

    def get(self, kind: str, source: str, extra: str, compute: Callable[[], Any]) -> Any:
        key = f"{kind}:{text_digest(source)}:{extra}"
        self.used.add(key)
        if key not in self.entries:
            self.entries[key] = compute()
            self.changed = True
        return self.entries[key]

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        if len(self.entries) > MAX_MEMO_ENTRIES:
            self.entries = {k: v for k, v in self.entries.items() if k in self.used}
        try:
            write_atomic(self.path, json.dumps(self.entries, separators=(",", ":")))
            _prune(self.path.parent, "memo-*.json", KEEP_MEMOS)
        except OSError as exc:
            log.detail(f"check: file analyses not cached ({exc})")
        self.changed = False

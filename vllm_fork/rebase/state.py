"""The stopped rebase, on disk in `build/rebase/`, so --continue/--abort work from a new process.

Besides the progress it keeps the exact bytes of `patches/` and `upstream.toml`
as they were, so `--abort` can put them back byte for byte whatever happened.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.fs import write_atomic
from vllm_fork.core.paths import REBASE_STATE, rebase_state_dir
from vllm_fork.rebase.classify import PatchResult
from vllm_fork.rebase.target import pin_from_dict
from vllm_fork.upstream.pin import PIN_FILE, Pin

STATE = REBASE_STATE
REPORT = "report.md"
ORIG_REF = "refs/fork/rebase/orig-head"  # keeps the pre-rebase commits reachable for --abort
SAVED = "saved"  # the queue and the pin as they were, byte for byte
#: Files the end of a rebase rewrites besides the queue and the pin (saved too, for --abort).
FINISH_OUTPUTS = ("Dockerfile", "ops-cache/index.json")
OUTPUTS_LIST = "outputs.json"  # which of FINISH_OUTPUTS existed (the others are removed on restore)
#: `RebaseState.stage` while stopped because the check or the tests failed (every patch applied).
CHECKS = "checks"


def state_dir(root: Path) -> Path:
    return rebase_state_dir(root)


@dataclass
class Options:
    branch: str = ""
    run_tests: bool = True
    tests_cmd: str = ""
    commit: bool = True
    replace_branch: bool = False
    seed: bool = False  # seed the ops cache when the compiled inputs changed
    accept_failing_tests: bool = False  # commit even when `invoke check` or the tests fail (recorded)


@dataclass
class RebaseState:
    old_pin: dict
    new_pin: dict
    source: str
    remote: str | None
    tree: str
    old_upstream: str
    new_upstream: str
    orig: dict  # the tree as it was: head, branch, upstream ref, tag, applied mark
    queue: list[str]  # patch file names in series order (copies under saved/patches)
    options: Options
    results: list[PatchResult] = field(default_factory=list)
    next_index: int = 0
    stopped_head: str = ""
    forecast: dict = field(default_factory=dict)  # the survey (survey.Survey.to_dict()) made before the first patch
    stage: str = ""  # CHECKS: every patch applied, stopped because the check or the tests failed

    def save(self, root: Path) -> None:
        data = asdict(self)
        write_atomic(state_dir(root) / STATE, (json.dumps(data, indent=1) + "\n").encode())

    @classmethod
    def load(cls, root: Path) -> RebaseState:
        path = state_dir(root) / STATE
        if not path.exists():
            raise ForkError("no rebase in progress: start one with `invoke rebase --to <version>` or `--latest`")
        data = json.loads(path.read_text())
        data["options"] = Options(**data["options"])
        data["results"] = [PatchResult(**r) for r in data["results"]]
        return cls(**data)

    def queue_paths(self, root: Path) -> list[Path]:
        return [state_dir(root) / SAVED / "patches" / n for n in self.queue]


def in_progress(root: Path) -> bool:
    return (state_dir(root) / STATE).exists()


def save_originals(root: Path) -> None:
    """Copy patches/ (every file), the pin and the other files the end rewrites into build/rebase/saved/."""
    saved = state_dir(root) / SAVED
    if saved.exists():
        shutil.rmtree(saved)
    shutil.copytree(root / "patches", saved / "patches")
    shutil.copy2(root / PIN_FILE, saved / PIN_FILE)
    existing = [rel for rel in FINISH_OUTPUTS if (root / rel).is_file()]
    for rel in existing:
        (saved / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, saved / rel)
    write_atomic(saved / OUTPUTS_LIST, json.dumps(existing).encode())


def originals_changed(root: Path) -> list[str]:
    """Files of patches/ or the pin that differ from the saved copies."""
    saved = state_dir(root) / SAVED
    changed = []
    names = {p.name for p in (root / "patches").iterdir()} | {p.name for p in (saved / "patches").iterdir()}
    for name in sorted(names):
        a, b = root / "patches" / name, saved / "patches" / name
        if not (a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()):
            changed.append(f"patches/{name}")
    if (root / PIN_FILE).read_bytes() != (saved / PIN_FILE).read_bytes():
        changed.append(PIN_FILE)
    return changed


def _outputs_changed(root: Path) -> list[str]:
    """FINISH_OUTPUTS that differ from what was saved (none when the state predates saving them)."""
    saved = state_dir(root) / SAVED
    if not (saved / OUTPUTS_LIST).is_file():
        return []
    existed = set(json.loads((saved / OUTPUTS_LIST).read_text()))
    changed = []
    for rel in FINISH_OUTPUTS:
        now, was = root / rel, saved / rel
        if rel in existed:
            if not (now.is_file() and now.read_bytes() == was.read_bytes()):
                changed.append(rel)
        elif now.exists():
            changed.append(rel)
    return changed


def restore_originals(root: Path) -> list[str]:
    """Put patches/, the pin and the other files the end rewrites back exactly as saved; return what changed."""
    saved = state_dir(root) / SAVED
    changed = originals_changed(root) + _outputs_changed(root)
    for rel in changed:
        src, dst = saved / rel, root / rel
        if src.exists():
            write_atomic(dst, src.read_bytes())
            shutil.copymode(src, dst)
        else:
            dst.unlink(missing_ok=True)
    return changed


def clear(root: Path, keep_report: bool = True) -> None:
    d = state_dir(root)
    (d / STATE).unlink(missing_ok=True)
    shutil.rmtree(d / SAVED, ignore_errors=True)
    if not keep_report:
        shutil.rmtree(d, ignore_errors=True)


@dataclass
class Outcome:
    """What a rebase step ended with: done (report committed), or stopped at a conflict or at failed checks."""

    done: bool
    report: str
    report_path: Path
    state: RebaseState
    branch: str = ""
    commit: str = ""
    stopped_at: str = ""  # "conflict", or CHECKS when the check or the tests failed
    check_problems: list[str] = field(default_factory=list)  # `invoke check`'s, stopped at or accepted


def new_pin_of(state: RebaseState) -> Pin:
    return pin_from_dict(state.new_pin)


def old_pin_of(state: RebaseState) -> Pin:
    return pin_from_dict(state.old_pin)


def write_report(root: Path, text: str) -> Path:
    """Write the rebase report to `build/rebase/report.md`; return its path."""
    path = state_dir(root) / REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode())
    return path

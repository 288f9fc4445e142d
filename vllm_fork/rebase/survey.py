"""The forecast: every patch tried on the new upstream before anything is resolved.

Each patch is tried in series order on a scratch index of the new upstream (the
patches before it that applied are in it), and, where an earlier patch failed,
also alone on the new upstream, since the failure may be the earlier one's. Outcomes:
  clean         applies as is (hunks near upstream changes listed to check by eye)
  3-way         applies only through a 3-way merge (its hunks to check by eye)
  dropped       upstream already has it (reverses cleanly), or its Upstream-Status
                drop condition holds for the new upstream
  target gone   a file it edits is not in the new upstream
  follows       a file it edits is one an earlier patch creates, and that patch
                fails: not an upstream deletion; the patch is tried again with
                the failing patches' changes carried over (their new files as
                the old queue made them, their edits merged into upstream's)
  conflict      the 3-way merge leaves conflict markers (files and hunks named)

Nothing outside a temporary directory changes: not patches/, the pin, build/vllm
nor the cache (a scratch repository borrows the cache repo's objects and writes
its own). The cache only gains what fetching the two upstreams brings.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vllm_fork.core.git import git
from vllm_fork.queue.carry import drop_reason, upstream_status
from vllm_fork.queue.patchfile import FileDiff, PatchFile, hunk_patch, parse_patch
from vllm_fork.rebase.blame import hunk_blame
from vllm_fork.rebase.classify import CLEAN, CONFLICT, DROPPED, THREE_WAY, hunks_near_changes, preimage
from vllm_fork.rebase.contentloss import describe, lost_lines

GONE = "target gone"
FOLLOWS = "follows"  # a file it edits comes from an earlier patch of the queue, which fails
#: What a failing patch's outcome is called in a follow-on's note ("depends on patch 1, which ...").
_FAILS_AS = {CONFLICT: "conflicts", GONE: "edits a file upstream no longer has", FOLLOWS: "fails in its turn"}


@dataclass
class Forecast:
    """What the survey expects for one patch."""

    name: str
    subject: str
    outcome: str
    files: dict[str, list[str]] = field(default_factory=dict)  # conflict: file -> hunks; gone: file -> []
    by_eye: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    blame: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    alone: str = ""  # the outcome alone on the new upstream, when an earlier patch failed


@dataclass
class Survey:
    forecasts: list[Forecast]
    seconds: float
    blame_note: str = ""  # why there is no blame (pypi source, history not fetchable); '' with blame
    from_version: str = ""  # the pinned release the queue is on ('' when not recorded)
    to_version: str = ""  # the release it was surveyed onto

    def failing(self) -> list[Forecast]:
        return [f for f in self.forecasts if f.outcome in (CONFLICT, GONE, FOLLOWS)]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Survey:
        return cls(
            [Forecast(**f) for f in data["forecasts"]],
            data["seconds"],
            data.get("blame_note", ""),
            data.get("from_version", ""),
            data.get("to_version", ""),
        )


class _Scratch:
    """A throwaway repository borrowing the cache repo's objects; one index file per use."""

    def __init__(self, tmp: Path, objects_from: Path):
        self.dir = tmp / "repo"
        git(None, "init", "-q", str(self.dir))
        (self.dir / ".git" / "objects" / "info" / "alternates").write_text(f"{objects_from / 'objects'}\n")

    def env(self, index: Path) -> dict[str, str]:
        return {"GIT_INDEX_FILE": str(index)}

    def git(
        self, *args: str, index: Path | None = None, check: bool = False, input: bytes | str | None = None
    ) -> subprocess.CompletedProcess:
        # A one-hunk patch is bytes (its file's own encoding): subprocess takes bytes in byte mode only.
        text = not isinstance(input, bytes)
        return git(self.dir, *args, env=self.env(index) if index else None, check=check, input=input, text=text)

    def read_tree(self, index: Path, commit: str) -> None:
        self.git("read-tree", commit, index=index, check=True)

    def blobs(self, index: Path, paths: list[str]) -> dict[str, str]:
        """path -> blob id (stage 0) in `index`."""
        found = {}
        for row in self.git("ls-files", "-s", "--", *paths, index=index, check=True).stdout.splitlines():
            meta, _, path = row.partition("\t")
            if meta.split()[2] == "0":
                found[path] = meta.split()[1]
        return found

    def text(self, blob: str) -> str:
        return self.git("cat-file", "blob", blob, check=True).stdout


def _seed_preimages(scratch: _Scratch, tmp: Path, old: str, patches: list[Path]) -> None:
    """Apply the old queue to the old upstream once, so every patch's pre- and postimage blobs exist."""
    index = tmp / "seed.index"
    scratch.read_tree(index, old)
    if scratch.git("apply", "--cached", *map(str, patches), index=index).returncode == 0:
        return  # one git call for the whole queue: the usual case
    scratch.read_tree(index, old)
    for patch in patches:
        if scratch.git("apply", "--cached", str(patch), index=index).returncode != 0:
            break  # the old queue is broken here; `invoke check` says so


def _creates(diff: FileDiff) -> bool:
    return preimage(diff) is None or any(h.startswith("new file mode") for h in diff.header)


def _postimage(diff: FileDiff) -> tuple[str, str] | None:
    """(mode, blob id) of the file as the patch leaves it, from its header (None: deleted)."""
    mode, blob = "100644", None
    for line in diff.header:
        if line.startswith(("new file mode ", "new mode ")):
            mode = line.split()[-1]
        elif line.startswith("index "):
            fields = line.split()  # index <pre>..<post> [mode]
            blob = fields[1].split("..")[1]
            mode = fields[2] if len(fields) > 2 else mode
    return None if blob is None or set(blob) == {"0"} else (mode, blob)


@dataclass
class _Origin:
    """The earlier patch of the queue that creates a file."""

    number: int  # 1-based place in the series
    forecast: Forecast
    diff: FileDiff


def _follow_on(
    scratch: _Scratch,
    tmp: Path,
    index: Path,
    old: str,
    patch: Path,
    parsed: PatchFile,
    changed: set[str],
    forecast: Forecast,
    created: dict[str, _Origin],
    failed_touch: dict[str, _Origin],
) -> None:
    """A target gone because an earlier patch that creates it failed: say so, and try the patch
    on the new upstream carrying the failing patches' changes over (as a resolution keeping them would)."""
    failed = {p: created[p] for p in forecast.files if p in created and created[p].forecast.outcome in _FAILS_AS}
    if not failed or set(failed) != set(forecast.files):
        return  # at least one file really is gone upstream
    forecast.outcome = FOLLOWS
    forecast.notes = [
        f"depends on patch {o.number} (`{o.forecast.name}`), which {_FAILS_AS[o.forecast.outcome]}: "
        f"`{path}` is a file that patch creates, not one upstream deleted or moved"
        for path, o in failed.items()
    ]
    trial = tmp / "follow-on.index"
    shutil.copyfile(index, trial)
    unmerged = []
    for diff in parsed.files:
        path, pre = diff.path, preimage(diff)  # pre: the file as the old queue had it just before this patch
        if pre is None or scratch.git("cat-file", "-e", pre).returncode != 0:
            continue
        if path in failed:
            mode = (_postimage(failed[path].diff) or ("100644", ""))[0]
            scratch.git("update-index", "--add", "--cacheinfo", f"{mode},{pre},{path}", index=trial, check=True)
        elif path in failed_touch:
            # Upstream's new file with the earlier patches' changes merged in.
            base = scratch.git("ls-tree", old, "--", path).stdout.split()
            ours = scratch.blobs(trial, [path]).get(path)
            if len(base) < 3 or ours is None:
                continue
            merged, conflicts, _, _ = _merge_file(scratch, tmp, {"1": base[2], "2": ours, "3": pre})
            if conflicts:
                unmerged.append(path)
                continue
            blob = scratch.git("hash-object", "-w", "--stdin", input=merged, check=True).stdout.strip()
            scratch.git("update-index", "--cacheinfo", f"{base[0]},{blob},{path}", index=trial, check=True)
    first = min(o.number for o in failed.values())
    if unmerged:
        files = ", ".join(f"`{p}`" for p in unmerged)
        forecast.notes.append(
            f"what it meets once patch {first} is resolved depends on that resolution: the earlier patches' "
            f"changes to {files} do not merge into the new upstream by themselves"
        )
        return
    solo, _ = _try(scratch, tmp, trial, patch, parsed, changed)
    forecast.alone = solo.outcome
    forecast.notes.append(
        f"with the earlier patches' changes carried over (as a resolution of patch {first} that keeps them "
        f"would), this patch: {solo.outcome}"
    )


def _failing_hunks(scratch: _Scratch, index: Path, parsed: PatchFile) -> dict[str, list[str]]:
    conflicts: dict[str, list[str]] = {}
    for diff in parsed.files:
        for hunk in diff.hunks:
            proc = scratch.git("apply", "--cached", "--check", "-", index=index, input=hunk_patch(diff, hunk))
            if proc.returncode != 0:
                conflicts.setdefault(diff.path, []).append(hunk[0])
    return conflicts


def _unmerged(scratch: _Scratch, index: Path) -> dict[str, dict[str, str]]:
    """path -> {stage: blob} for the entries a `git apply --3way --cached` left unmerged."""
    stages: dict[str, dict[str, str]] = {}
    for row in scratch.git("ls-files", "-u", index=index, check=True).stdout.splitlines():
        meta, _, path = row.partition("\t")
        _, blob, stage = meta.split()
        stages.setdefault(path, {})[stage] = blob
    return stages


def _merge_file(scratch: _Scratch, tmp: Path, stages: dict[str, str]) -> tuple[str, int, str, str]:
    """git merge-file on the three stages: (merged text, conflicts, base text, ours text)."""
    texts = {s: scratch.text(b) if b else "" for s, b in ((s, stages.get(s, "")) for s in ("1", "2", "3"))}
    names = {}
    for s, t in texts.items():
        names[s] = tmp / f"stage{s}"
        names[s].write_text(t)
    proc = scratch.git("merge-file", "-p", str(names["2"]), str(names["1"]), str(names["3"]))
    return proc.stdout, proc.returncode, texts["1"], texts["2"]


def _three_way(scratch: _Scratch, tmp: Path, index: Path, patch: Path, parsed: PatchFile, forecast: Forecast) -> bool:
    """Merge `patch` into `index` through 3-way merges; False (index untouched) on conflict."""
    backup = tmp / "before-3way.index"
    shutil.copyfile(index, backup)
    proc = scratch.git("apply", "--cached", "--3way", str(patch), index=index)
    stages = _unmerged(scratch, index)
    if proc.returncode != 0 and not stages:
        shutil.copyfile(backup, index)
        return False  # git could not even start a merge (no preimage blob)
    by_path = {d.path: d for d in parsed.files}
    resolved = []
    for path, blobs in stages.items():
        merged, conflicts, base, ours = _merge_file(scratch, tmp, blobs)
        if conflicts:
            shutil.copyfile(backup, index)
            return False
        if path in by_path:
            lost = lost_lines(base, ours, merged, by_path[path])
            if lost:
                forecast.lost.append(describe(path, lost))
        blob = scratch.git("hash-object", "-w", "--stdin", input=merged, check=True).stdout.strip()
        mode = next(
            row.split()[0]
            for row in scratch.git("ls-files", "-u", "--", path, index=index).stdout.splitlines()
            if row.split()[2] == "2"
        )
        resolved.append((mode, blob, path))
    for mode, blob, path in resolved:
        scratch.git("update-index", "--force-remove", "--", path, index=index, check=True)
        scratch.git("update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}", index=index, check=True)
    return True


def _by_eye(
    scratch: _Scratch, parsed: PatchFile, before: dict[str, str], changed: set[str]
) -> list[tuple[FileDiff, list[str], str]]:
    """(diff, hunk, flag) for hunks near lines upstream changed since the patch was written."""
    found = []
    for diff in parsed.files:
        pre, now = preimage(diff), before.get(diff.path)
        if diff.path not in changed or pre is None or now is None or now == pre:
            continue
        if scratch.git("cat-file", "-e", pre).returncode != 0:
            continue
        found += [(diff, hunk, flag) for hunk, flag in hunks_near_changes(scratch.dir, diff, pre, now)]
    return found


def _try(
    scratch: _Scratch, tmp: Path, index: Path, patch: Path, parsed: PatchFile, changed: set[str]
) -> tuple[Forecast, list[tuple[FileDiff, list[str]]]]:
    """One patch on `index` (changed in place when it applies); the forecast and the hunks to blame."""
    forecast = Forecast(patch.name, parsed.subject, CLEAN)
    paths = [d.path for d in parsed.files]
    before = scratch.blobs(index, paths)
    if scratch.git("apply", "--cached", str(patch), index=index).returncode == 0:
        forecast.by_eye = [flag for _, _, flag in _by_eye(scratch, parsed, before, changed)]
        return forecast, []
    if scratch.git("apply", "--cached", "--check", "--reverse", str(patch), index=index).returncode == 0:
        forecast.outcome = DROPPED
        forecast.notes.append("upstream already contains every change of this patch (it reverses cleanly)")
        return forecast, []
    gone = [d.path for d in parsed.files if not _creates(d) and d.path not in before]
    if gone:
        forecast.outcome = GONE
        forecast.files = {p: [] for p in gone}
        forecast.notes.append("upstream deleted or moved " + ", ".join(f"`{p}`" for p in gone))
        return forecast, []
    if _three_way(scratch, tmp, index, patch, parsed, forecast):
        forecast.outcome = THREE_WAY
        eye = _by_eye(scratch, parsed, before, changed)
        forecast.by_eye = [flag for _, _, flag in eye] or ["applied by 3-way merge: read the result"]
        return forecast, [(d, h) for d, h, _ in eye]
    forecast.outcome = CONFLICT
    forecast.files = _failing_hunks(scratch, index, parsed)
    by_path = {d.path: d for d in parsed.files}
    blame = [
        (by_path[p], h)
        for p, hunks in forecast.files.items()
        for hh in hunks
        for h in by_path[p].hunks
        if h[0] == hh and p in by_path
    ]
    return forecast, blame


def survey(
    patches: list[Path],
    objects_from: Path,
    old: str,
    new: str,
    new_version: str,
    blame_from: Path | None = None,
    blame_note: str = "",
) -> Survey:
    """Forecast every patch of the series on upstream `new` (commits in repo `objects_from`).

    `blame_from`: the repository holding the history old..new (git source, fetched), or
    None, with `blame_note` saying why there is no blame.
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vllm-fork-survey-") as tmpdir:
        tmp = Path(tmpdir)
        scratch = _Scratch(tmp, objects_from)
        if blame_from is not None and (blame_from / "shallow").exists():
            # The borrowed history is shallow: say where it ends, or `git log` walks off it.
            shutil.copyfile(blame_from / "shallow", scratch.dir / ".git" / "shallow")
        _seed_preimages(scratch, tmp, old, patches)
        series, alone = tmp / "series.index", tmp / "alone.index"
        scratch.read_tree(series, new)
        changed = set(scratch.git("diff", "--name-only", old, new, check=True).stdout.splitlines())
        forecasts: list[Forecast] = []
        failed_before: list[str] = []
        created: dict[str, _Origin] = {}  # files the queue creates -> the first patch that does
        failed_touch: dict[str, _Origin] = {}  # files earlier failing patches edit -> the last one that does
        for number, patch in enumerate(patches, 1):
            parsed = parse_patch(patch)
            try:
                status = upstream_status(parsed)
            except ValueError:
                status = None  # `invoke check` names a malformed trailer; the patch is tried as carried
            drops, why = drop_reason(status, new_version, new, blame_from) if status else (False, "")
            if drops:
                forecasts.append(Forecast(patch.name, parsed.subject, DROPPED, notes=[why]))
                continue
            forecast, to_blame = _try(scratch, tmp, series, patch, parsed, changed)
            if forecast.outcome == GONE:
                _follow_on(scratch, tmp, series, old, patch, parsed, changed, forecast, created, failed_touch)
            for diff in parsed.files:
                if _creates(diff):
                    created.setdefault(diff.path, _Origin(number, forecast, diff))
                if forecast.outcome in _FAILS_AS:
                    failed_touch[diff.path] = _Origin(number, forecast, diff)
            if status is not None and status.kind != "carry":
                forecast.notes.insert(0, why or f"Upstream-Status: {status}")
            if forecast.outcome in (CONFLICT, GONE) and failed_before:
                scratch.read_tree(alone, new)
                solo, solo_blame = _try(scratch, tmp, alone, patch, parsed, changed)
                forecast.alone = solo.outcome
                forecast.notes.append(
                    f"alone on the new upstream: {solo.outcome}"
                    + (
                        " — it fails here only after an earlier failing patch"
                        if solo.outcome != forecast.outcome
                        else ""
                    )
                )
            if forecast.outcome in (CONFLICT, GONE, FOLLOWS):
                failed_before.append(patch.name)
            if blame_from is not None:
                for diff, hunk in to_blame:
                    forecast.blame += hunk_blame(scratch.dir, old, new, diff, hunk)
            forecasts.append(forecast)
    return Survey(forecasts, time.monotonic() - started, "" if blame_from is not None else blame_note)

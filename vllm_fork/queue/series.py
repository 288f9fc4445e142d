"""`patches/series`: the order of the queue, and its agreement with the files."""

from __future__ import annotations

from pathlib import Path

from vllm_fork.core.errors import ConfigError

SERIES = "series"


def series_entries(patches_dir: Path) -> list[str]:
    """Entries of the series file, comments and blank lines skipped."""
    path = patches_dir / SERIES
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append(line)
    return entries


def series_problems(patches_dir: Path) -> list[str]:
    """Every disagreement between the series and the patch files."""
    problems: list[str] = []
    entries = series_entries(patches_dir)
    seen: set[str] = set()
    for entry in entries:
        if entry in seen:
            problems.append(f"series: {entry} is listed twice")
            continue
        seen.add(entry)
        target = (patches_dir / entry).resolve()
        if "/" in entry or "\\" in entry or entry.startswith(".") or target.parent != patches_dir.resolve():
            problems.append(f"series: {entry!r} is not a file directly inside patches/")
        elif not target.is_file():
            problems.append(f"series: {entry} is listed but patches/{entry} does not exist")
    on_disk = {p.name for p in patches_dir.glob("*.patch")}
    for extra in sorted(on_disk - seen):
        problems.append(f"patches/{extra} is not listed in patches/series")
    return problems


def read_series(patches_dir: Path) -> list[Path]:
    """The patch files in series order; ForkError listing every problem if they disagree."""
    problems = series_problems(patches_dir)
    if problems:
        raise ConfigError(
            "patches/series and the patch files disagree:\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\nFix the series (one file name per line) or run `invoke export` from build/vllm."
        )
    return [patches_dir / e for e in series_entries(patches_dir)]

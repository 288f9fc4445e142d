"""Reading one `git format-patch` file: its subject, body, files and hunks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.header import decode_header, make_header
from pathlib import Path

from vllm_fork.core.errors import ForkError

_DIFF = re.compile(r"^diff --git a/(.+?) b/(.+)$")
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@.*$")
# git's trailer line: a token of letters, digits and dashes, then ':' (interpret-trailers' default).
_TRAILER = re.compile(r"^[A-Za-z0-9-]+\s*:")
# Lines git itself writes: one of them lets a mostly-trailer paragraph count as trailers.
_GIT_GENERATED = ("Signed-off-by: ", "(cherry picked from commit ")


@dataclass
class FileDiff:
    path: str
    header: list[str] = field(default_factory=list)
    hunks: list[list[str]] = field(default_factory=list)


@dataclass
class PatchFile:
    path: Path
    author: str
    subject: str
    body: str
    files: list[FileDiff]

    @property
    def touched(self) -> list[str]:
        return [f.path for f in self.files]

    @property
    def why(self) -> str:
        """The body without its trailer block (Signed-off-by:, Co-authored-by: ...)."""
        return split_trailers(self.body)[0]


def is_trailer_block(paragraph: list[str]) -> bool:
    """git's rule (trailer.c): every line a trailer, or a git-written one and at least 25 % trailers.

    An indented line continues the trailer above it.
    """
    trailers = others = 0
    recognized = continues = False
    for line in paragraph:
        if line.startswith(_GIT_GENERATED):
            trailers, recognized, continues = trailers + 1, True, True
        elif _TRAILER.match(line):
            trailers, continues = trailers + 1, True
        elif line[:1].isspace() and continues:
            continue
        else:
            others, continues = others + 1, False
    return trailers > 0 and (others == 0 or (recognized and trailers * 3 >= others))


def split_trailers(body: str) -> tuple[str, str]:
    """(text, trailers): as git, only the body's last paragraph can hold trailers.

    So "Why: ..." or "Note: ..." in an earlier paragraph is text.
    """
    paragraphs = re.split(r"\n[ \t]*\n", body.strip())
    if is_trailer_block(paragraphs[-1].splitlines()):
        return "\n\n".join(paragraphs[:-1]).strip(), paragraphs[-1]
    return body.strip(), ""


class _HunkCounter:
    """Checks each hunk's lines against the counts its `@@ -a,b +c,d @@` header gives.

    A hand-edited or cut patch fails here with the file and line, not later in `git am`
    with git's line number inside its own copy of the diff.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.old = self.new = 0
        self.at = 0  # the header's line number; 0 outside a hunk
        self.file = ""

    def start(self, number: int, file: str, header: re.Match) -> None:
        self.end(number)
        self.at, self.file = number, file
        self.old = int(header.group(1) if header.group(1) is not None else 1)
        self.new = int(header.group(2) if header.group(2) is not None else 1)

    def line(self, number: int, line: str) -> None:
        kind = line[:1]
        if kind == "\\":  # "\ No newline at end of file" belongs to the line before
            return
        if not self.at or (self.old == 0 and self.new == 0):
            if line.strip():
                self.fail(number, f"{line[:60]!r} follows a complete hunk (its header counts fewer lines)")
            return
        if kind in (" ", ""):  # an empty context line whose space an editor stripped
            self.old, self.new = self.old - 1, self.new - 1
        elif kind == "-":
            self.old -= 1
        elif kind == "+":
            self.new -= 1
        else:
            self.fail(number, f"{line[:60]!r} is not a diff line (each starts with ' ', '+' or '-')")
        if self.old < 0 or self.new < 0:
            self.fail(number, "the hunk has more lines than its header counts")

    def end(self, number: int) -> None:
        if self.at and (self.old > 0 or self.new > 0):
            self.fail(number, f"the hunk ends {self.old} old / {self.new} new line(s) short of what its header counts")
        self.at = 0

    def fail(self, number: int, problem: str) -> None:
        where = f" (hunk at line {self.at}, {self.file})" if self.at else ""
        raise ForkError(
            f"patches/{self.path.name} line {number}: {problem}{where}. The patch is corrupt (edited by hand or cut "
            f"short): restore it (`git checkout -- patches/{self.path.name}`) or write it again with `invoke export`; "
            "then `invoke check`."
        )


def parse_patch(path: Path) -> PatchFile:
    """Parse a mail-format patch; raise ForkError naming the file if it is not one."""
    # Bytes, not universal newlines: a CRLF copy must be seen, and a patch of a latin-1
    # file holds latin-1 lines, which surrogateescape carries through unchanged.
    data = path.read_bytes()
    if not data.strip():
        raise ForkError(f"{path.name}: the file is empty")
    first = data.split(b"\n", 1)[0]
    if first.endswith(b"\r"):
        raise ForkError(
            f"{path.name}: has Windows (CRLF) line endings (an editor or git's core.autocrlf converted it); "
            "`git am` would write CR into every line it adds. Restore it with `git checkout -- patches/` "
            "or re-export it with `invoke export`; then `invoke check`."
        )
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    if not lines[0].startswith("From "):
        raise ForkError(
            f"{path.name}: does not start with a 'From <commit>' line; "
            "write patches with `invoke export` (git format-patch), not `git diff`"
        )
    headers: dict[str, str] = {}
    i, last = 1, None
    while i < len(lines) and lines[i] != "":
        line = lines[i]
        if line[:1] in (" ", "\t") and last:
            headers[last] += " " + line.strip()
        else:
            key, _, value = line.partition(":")
            last = key.strip().lower()
            headers[last] = value.strip()
        i += 1
    if "subject" not in headers:
        raise ForkError(f"{path.name}: no Subject header")
    subject = str(make_header(decode_header(headers["subject"])))
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject).strip()
    body_lines: list[str] = []
    i += 1
    while i < len(lines) and lines[i] != "---" and not lines[i].startswith("diff --git "):
        body_lines.append(lines[i])
        i += 1
    files: list[FileDiff] = []
    current: FileDiff | None = None
    hunk = _HunkCounter(path)
    # The text after the file's last newline is no line of the diff.
    for number, line in enumerate(lines[i : len(lines) - (lines[-1] == "")], start=i + 1):
        if m := _DIFF.match(line):
            hunk.end(number)
            current = FileDiff(m.group(2))
            current.header.append(line)
            files.append(current)
        elif current is None:
            continue
        elif m := _HUNK.match(line):
            hunk.start(number, current.path, m)
            current.hunks.append([line])
        elif line == "-- ":
            hunk.end(number)
            current = None  # the signature separator ends the last diff
        elif current.hunks:
            hunk.line(number, line)
            current.hunks[-1].append(line)
        else:
            current.header.append(line)
    hunk.end(len(lines))
    if not files:
        raise ForkError(f"{path.name}: holds no diff (is it truncated or corrupt?)")
    author = str(make_header(decode_header(headers.get("from", ""))))
    return PatchFile(path, author, subject, "\n".join(body_lines).strip(), files)


def hunk_patch(diff: FileDiff, hunk: list[str]) -> bytes:
    """A one-hunk patch, to test whether that hunk alone applies (bytes: the file's own encoding)."""
    body = hunk[:]
    while body and body[-1] == "":
        body.pop()
    return ("\n".join(diff.header + body) + "\n").encode("utf-8", "surrogateescape")

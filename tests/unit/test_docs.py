"""The docs stay short and true: the pin, the queue, the tasks and every quoted figure are checked
against their one source, and the site builds in MkDocs' strict mode.

Each failure names the file and line. What is checked:
- no doc, help text, data-file header or the Dockerfile names a vLLM release other than the pin
  (`upstream.toml`) or a queue length other than `patches/series`' (outside docs/upstream-bumps.md,
  the bump history, and ALLOWED below);
- every figure quoted with a `<!-- fig: benchmarks/results/FILE.json#KEY -->` marker equals the
  value in that result, and no figure is quoted in two places;
- README.md's task table lists exactly the tasks `invoke --list` has, each option it names is in
  the task's `--help`; every `invoke TASK --option` in the docs exists; the README's patch table
  is `patches/series`, in order, with each patch's size and `Upstream-Status`;
- the README fits in 250 lines, docs/ in 12,000 words, and no table runs past a screen.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from packaging.version import Version

from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue.patchfile import parse_patch
from vllm_fork.queue.report import patch_report

README = REPO_ROOT / "README.md"
BUMP_HISTORY = "docs/upstream-bumps.md"
README_MAX_LINES = 250
DOCS_MAX_WORDS = 12_000
#: Texts written for vLLM's reviewers, not for this project's readers (the RFC and the PR
#: descriptions, issue 60): they follow upstream's templates and are left out of the budget.
FOR_UPSTREAM = ("docs/rfc-tower-streaming.md", "docs/upstream/")
TABLE_MAX_ROWS = 24

# (path, text on the line, why it may name another release or queue length). Keep it short.
ALLOWED: list[tuple[str, str, str]] = [
    ("requirements/vllm-cpu-tests.txt", "torchvision==", "torchvision's own version, not vLLM's"),
]


def _pin() -> Version:
    return Version(tomllib.loads((REPO_ROOT / "upstream.toml").read_text())["version"])


def _queue_length() -> int:
    lines = (REPO_ROOT / "patches" / "series").read_text().splitlines()
    return sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))


def _docs() -> list[Path]:
    pages = [README, *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    pages += [REPO_ROOT / "benchmarks" / "README.md", REPO_ROOT / "benchmarks" / "gpu" / "README.md"]
    return [p for p in pages if p.exists()]


def _headers() -> list[Path]:
    """Files whose comments say which release they were made from."""
    files = [REPO_ROOT / "Dockerfile", REPO_ROOT / "vllm_fork" / "image" / "standin.toml"]
    files += sorted((REPO_ROOT / "ops-cache").glob("*.toml")) + sorted((REPO_ROOT / "ops-cache").glob("*.txt"))
    files += sorted((REPO_ROOT / "requirements").glob("*.txt"))
    return files


def _rel(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def _invoke(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return proc.stdout


@cache
def _task_names() -> tuple[str, ...]:
    listed = _invoke("--list")
    return tuple(m.group(1) for m in re.finditer(r"^  ([a-z][\w.-]*)(?:\s|$)", listed, re.M))


@cache
def _task_help(name: str) -> str:
    return _invoke("--help", name)


def _texts() -> Iterator[tuple[str, int, str]]:
    """(where, line number, line) of every doc, header and help text under the staleness rules."""
    for path in _docs() + _headers():
        if _rel(path) == BUMP_HISTORY:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            yield _rel(path), number, line
    for name in _task_names():
        for number, line in enumerate(_task_help(name).splitlines(), 1):
            yield f"`invoke {name} --help`", number, line


def _allowed(where: str, line: str) -> bool:
    return any(where == path and text in line for path, text, _ in ALLOWED)


# A vLLM release: 0.N.M anywhere (vllm-0.N.M, v0.N.M, "vLLM 0.N.M") but after another package's
# version specifier, and "vLLM 0.N" for a minor line.
RELEASE = re.compile(r"(?<![\w.])v?(0\.\d+\.\d+)(?!\w|\.\d)")
MINOR = re.compile(r"(?i)\bvllm[ -](0\.\d+)(?!\d|\.\d)")
OTHER_PACKAGE_SPEC = re.compile(r"(?i)(?<!vllm)(==|>=|<=|~=|!=|<|>)\s*v?$")
FUTURE_EXAMPLE = re.compile(r"--to[ =]v?$")
# Another package's version written after its name ("uv 0.5.1", "huggingface_hub 0.26.0").
OTHER_PACKAGE_NAME = re.compile(
    r"(?i)\b(?:torch\w*|tokenizers|transformers|uv|ruff|pip|setuptools[\w-]*|huggingface[_-]hub|safetensors"
    r"|triton|numpy|compressed-tensors|mistral[_-]common|mkdocs|nccl|flashinfer[\w-]*|cutlass[\w-]*|mypy"
    r"|pytest|invoke|packaging|matplotlib|hadolint[\w-]*)[ =:]*v?$"
)


def release_mentions(line: str) -> Iterator[tuple[str, bool]]:
    """(version, is an example of a release after the pin) for each vLLM release the line names."""
    for match in RELEASE.finditer(line):
        before = line[: match.start()]
        if OTHER_PACKAGE_SPEC.search(before) or OTHER_PACKAGE_NAME.search(before):
            continue
        yield match.group(1), bool(FUTURE_EXAMPLE.search(before))
    for match in MINOR.finditer(line):
        yield match.group(1), False


def stale_releases(line: str, pin: Version) -> list[str]:
    stale = []
    for text, example in release_mentions(line):
        version = Version(text)
        if len(version.release) == 2:
            if version.release != pin.release[:2]:
                stale.append(text)
        elif version != pin and not (example and version > pin):
            stale.append(text)
    return stale


# Claims about the current queue's length ("the 12-patch queue", "now 12", "patches 2 to 8 of 12").
QUEUE_CLAIMS = [
    re.compile(r"(?i)\bthe (\d+)-patch (?:queue|series)\b"),
    re.compile(r"(?i)\b(?:queue|series) (?:is|has|holds|of) (\d+) patch"),
    re.compile(r"(?i)\b(\d+) patches (?:in|on) (?:the|this) (?:queue|series)\b"),
    re.compile(r"(?i)\bpatch(?:es)? \d+(?:(?: to |[–-]|, | and )\d+)* of (\d+)\b"),
    re.compile(r"(?i)\bnow (\d+)(?=\)| patches\b| in the (?:queue|series)\b)"),
]


# "patch 13" of a 12-patch queue names a patch that is not there.
PATCH_NUMBER = re.compile(r"(?i)\bpatch(?:es)? (?:\d+(?: to |[–-]|, | and ))*(\d+)\b(?! of)")


def stale_queue_lengths(line: str, length: int) -> list[str]:
    claims = [m.group(0) for rule in QUEUE_CLAIMS for m in rule.finditer(line) if int(m.group(1)) != length]
    return claims + [m.group(0) for m in PATCH_NUMBER.finditer(line) if int(m.group(1)) > length]


def test_the_rules_catch_what_went_stale():
    pin = Version("0.34.0")
    assert stale_releases("dist/vllm-0.33.0+fork.914bed8a-cp38-abi3.whl", pin) == ["0.33.0"]
    assert stale_releases("# Upstream's own compile image for v0.33.0 (docker/Dockerfile)", pin) == ["0.33.0"]
    assert stale_releases("transformers>=5.16.1,<5.21.0  # vLLM 0.33.0's range", pin) == ["0.33.0"]
    assert stale_releases("All 50 families of vLLM 0.33, each", pin) == ["0.33"]
    assert stale_releases("compressed-tensors==0.17.0  # vLLM 0.34.0's pin", pin) == []
    assert stale_releases("invoke rebase --survey --to 0.35.0", pin) == []
    assert stale_releases("invoke rebase --to 0.32.0", pin) == ["0.32.0"]
    assert stale_releases("a KV cache of 0.904x the tower, 0.58 MiB", pin) == []
    assert stale_releases("installs uv 0.5.1 and huggingface_hub 0.26.0 first", pin) == []
    assert stale_releases("upstream's official 0.33.0 wheel", pin) == ["0.33.0"]
    assert stale_queue_lengths("(0.33.0 -> 0.34.0: a new patch, now 13)", 12) == ["now 13"]
    assert stale_queue_lengths("the streamer series, patches 2 to 8 and 12 of 12", 11) == [
        "patches 2 to 8 and 12 of 12"
    ]
    assert stale_queue_lengths("what does the 12-patch queue do", 12) == []
    assert stale_queue_lengths("as patch 13 does; patches 2 to 14", 12) == ["patch 13", "patches 2 to 14"]
    assert stale_queue_lengths("patch 12 keeps it; patches 2-8", 12) == []
    assert stale_queue_lengths("a 100-patch queue in the scale benchmark; now 2 s", 12) == []


def test_docs_help_and_headers_name_the_pin_and_the_queue_as_they_are():
    pin, length = _pin(), _queue_length()
    problems = []
    for where, number, line in _texts():
        if _allowed(where, line):
            continue
        for version in stale_releases(line, pin):
            problems.append(f"{where}:{number}: names vLLM {version}, the pin is {pin} (upstream.toml)")
        for claim in stale_queue_lengths(line, length):
            problems.append(f"{where}:{number}: {claim!r}, the queue is {length} patches (patches/series)")
    assert not problems, "\n".join(problems)


FIGURE = re.compile(r"<!--\s*fig:\s*(?P<file>[^#\s]+)#(?P<key>\S+)\s*-->")
NUMBER = re.compile(r"[-+−]?\d[\d,]*(?:\.\d+)?")
UNITS = {"MiB": 2**20, "GiB": 2**30, "ms": 1e-3}


def lookup(data: object, key: str) -> float:
    """The value at KEY: dotted names (a name may hold dots itself), a list's item by number,
    `name[field=value]` the item of a list whose field has that value; then `@count:field=value`
    counts a list's items, `@len` its length, `@MiB` / `@GiB` divide bytes and `@ms` seconds."""
    path, *steps = key.split("@")
    value: object = data
    rest = path
    while rest:
        if isinstance(value, list):
            index, _, rest = rest.partition(".")
            value = value[int(index)]
            continue
        assert isinstance(value, dict), f"{rest}: not a mapping"
        names = [k for k in value if rest == k or rest.startswith((f"{k}.", f"{k}["))]
        assert names, f"no key {rest.split('.')[0]!r}"
        name = max(names, key=len)
        value, rest = value[name], rest[len(name) :]
        if rest.startswith("["):
            selector, _, rest = rest[1:].partition("]")
            field, _, wanted = selector.partition("=")
            assert isinstance(value, list), f"{name}: not a list"
            value = next(item for item in value if str(item.get(field)) == wanted)
        rest = rest.removeprefix(".")
    for step in steps:
        if step == "len":
            assert isinstance(value, list)
            value = len(value)
        elif step.startswith("count:"):
            field, _, wanted = step.removeprefix("count:").partition("=")
            assert isinstance(value, list)
            value = sum(1 for item in value if str(item.get(field)) == wanted)
        else:
            assert isinstance(value, int | float), f"@{step}: {value!r} is not a number"
            value = value / UNITS[step]
    assert isinstance(value, int | float) and not isinstance(value, bool), f"{key}: {value!r} is not a number"
    return float(value)


def quoted_figures() -> Iterator[tuple[str, int, str, str, str]]:
    """(page, line, the number before the marker, result file, key) for every figure marker."""
    for page in _docs():
        for number, line in enumerate(page.read_text().splitlines(), 1):
            line = re.sub(r"`[^`]*`", "", line)  # a marker shown as code is an example
            start = 0
            for match in FIGURE.finditer(line):
                numbers = NUMBER.findall(line[start : match.start()])
                start = match.end()
                yield _rel(page), number, numbers[-1] if numbers else "", match["file"], match["key"]


def agrees(text: str, value: float) -> bool:
    """Whether TEXT is VALUE rounded to as many decimals as TEXT shows."""
    text = text.replace(",", "").replace("−", "-")
    decimals = len(text.partition(".")[2])
    return abs(float(text) - value) <= 0.5 * 10**-decimals + 1e-9


def test_every_quoted_figure_is_its_result_s_value_and_quoted_once():
    problems, seen = [], {}
    for page, number, text, file, key in quoted_figures():
        where = f"{page}:{number}"
        if not file.startswith("benchmarks/results/") or not (REPO_ROOT / file).is_file():
            problems.append(f"{where}: {file} is not a result file in benchmarks/results/")
            continue
        try:
            value = lookup(json.loads((REPO_ROOT / file).read_text()), key)
        except (AssertionError, KeyError, IndexError, ValueError, StopIteration) as exc:
            problems.append(f"{where}: {file}#{key}: no such number ({exc})")
            continue
        if not text or not agrees(text, value):
            problems.append(f"{where}: says {text or 'nothing'}, {file}#{key} is {value:g}")
        if page.startswith(FOR_UPSTREAM):
            continue  # a text for upstream's readers repeats the project's figures, each checked here
        if (file, key) in seen:
            problems.append(f"{where}: {file}#{key} is already quoted at {seen[file, key]}: quote it once")
        seen[file, key] = where
    assert seen, "no figure markers found"
    assert not problems, "\n".join(problems)


def test_a_figure_must_match_its_rounding():
    assert agrees("4.1", 4.1) and agrees("1.8", 1.758) and agrees("40", 40.1) and agrees("1,136", 1136)
    assert not agrees("4.2", 4.1) and not agrees("41", 40.1) and not agrees("0.91", 0.904)
    result = {"rows": [{"family": "a", "ok": True, "s": 3}, {"family": "b", "ok": False}], "t": {"le_1.10": 2097152}}
    assert lookup(result, "rows@count:ok=True") == 1 and lookup(result, "rows@len") == 2
    assert (
        lookup(result, "t.le_1.10@MiB") == 2.0 and lookup(result, "rows[family=a].s") == lookup(result, "rows.0.s") == 3
    )


def _task_table() -> dict[str, list[str]]:
    """The task named in each row of README.md's task table, with the rows' options."""
    rows: dict[str, list[str]] = {}
    for line in README.read_text().splitlines():
        match = re.match(r"\|\s*`invoke ([a-z][\w.]*)([^`]*)`", line)
        if match:
            rows.setdefault(match[1], []).extend(re.findall(r"--[a-z][\w-]*", line.split("|")[1]))
    return rows


def test_readme_task_table_lists_every_task_and_only_real_options():
    table, tasks = _task_table(), _task_names()
    assert set(tasks) - set(table) == set(), f"README.md's task table lacks {sorted(set(tasks) - set(table))}"
    assert set(table) - set(tasks) == set(), (
        f"README.md's task table lists no such task {sorted(set(table) - set(tasks))}"
    )
    for name, options in table.items():
        help_text = _task_help(name)
        missing = [option for option in options if not re.search(rf"{option}\b", help_text)]
        assert not missing, f"README.md task table: `invoke {name} --help` has no {missing}"


COMMAND = re.compile(r"\binvoke ([a-z][\w.]*)([^`\n#|;&)\]]*)")


def test_every_task_option_the_docs_name_exists():
    """`invoke TASK --option` anywhere in the docs: TASK exists and its `--help` has the option."""
    tasks, problems = set(_task_names()), []
    for page in _docs():
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for match in COMMAND.finditer(line):
                name, before = match[1].rstrip("."), line[: match.start()].rstrip()
                if name not in tasks:
                    as_code = before.endswith(("`", "$", "&&", ".venv/bin/")) or not before
                    if as_code and not name.startswith("-"):
                        problems.append(f"{_rel(page)}:{number}: `invoke {name}`: no such task")
                    continue
                for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", match[2]):
                    if not re.search(rf"{option}\b", _task_help(name)):
                        problems.append(f"{_rel(page)}:{number}: `invoke {name} {option}`: no such option")
    assert not problems, "\n".join(problems)


def test_readme_patch_table_is_the_series_with_its_sizes_and_status():
    """One row per patch of patches/series, in its order, each linking to the patch file, with
    its code + test lines and its `Upstream-Status` as `invoke check --report` reads them."""
    series = [line.strip() for line in (REPO_ROOT / "patches" / "series").read_text().splitlines()]
    series = [name for name in series if name and not name.startswith("#")]
    rows = re.findall(
        r"^\|\s*(\d+)\s*\|.*?\]\(patches/([^)]+\.patch)\)[^|]*\|[^|]*\|\s*([\d,]+) \+ ([\d,]+)\s*\|\s*\[?(\w+)",
        README.read_text(),
        re.M,
    )
    assert [row[1] for row in rows] == series, (
        "README.md's patch table does not list patches/series in order:\n"
        f"  table:  {[row[1] for row in rows]}\n  series: {series}"
    )
    problems = []
    for index, (number, name, code, tests, status) in enumerate(rows, 1):
        report = patch_report(index, parse_patch(REPO_ROOT / "patches" / name))
        want = (index, report.added["code"], report.added["tests"], report.message.upstream_status.split()[0])
        have = (int(number), int(code.replace(",", "")), int(tests.replace(",", "")), status)
        if have != want:
            problems.append(f"README.md patch table, {name}: says (#, code, tests, status) {have}, the patch {want}")
    assert not problems, "\n".join(problems)


def test_the_readme_and_the_docs_stay_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md is {len(lines)} lines (at most {README_MAX_LINES})"
    pages = [p for p in sorted((REPO_ROOT / "docs").rglob("*.md")) if not _rel(p).startswith(FOR_UPSTREAM)]
    words = {_rel(p): len(p.read_text().split()) for p in pages}
    assert sum(words.values()) <= DOCS_MAX_WORDS, (
        f"docs/ is {sum(words.values())} words (at most {DOCS_MAX_WORDS}): {words}"
    )
    for page in _docs():
        run = 0
        for number, line in enumerate(page.read_text().splitlines(), 1):
            run = run + 1 if line.startswith("|") else 0
            assert run <= TABLE_MAX_ROWS + 2, f"{_rel(page)}:{number}: a table longer than a screen"


def test_the_docs_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: a broken link, a page left out of the nav or a dangling anchor fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "site" / "index.html").is_file()

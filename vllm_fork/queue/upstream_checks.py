"""vLLM's own pre-commit checks, run per patch on the files that patch adds or changes.

The hooks come from the pinned tree's `.pre-commit-config.yaml`: its Python hooks under
`tools/pre_commit/` (torch.cuda calls, SPDX headers, forbidden imports, mypy through
`tools/pre_commit/mypy.py`, ...) run as its `entry` says, and ruff and typos (remote hooks,
GitHub-hosted) run from the tool environment at the versions that config pins. Each patch is
checked in a scratch worktree at the commit that applies it, so a hook sees the tree as it
stands after that patch. Results are cached by the commit's tree and the tools' pins.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml
from identify.identify import tags_from_path

from vllm_fork.core.errors import ConfigError
from vllm_fork.core.git import git, out
from vllm_fork.core.paths import REPO_ROOT, cache_subdir

#: The pinned tools (ruff, typos, mypy and the hooks' additional_dependencies).
REQUIREMENTS = REPO_ROOT / "requirements" / "upstream-checks" / "tools.txt"
#: Overrides where the tool environment is; by default a venv inside the running one
#: (kept apart: vLLM pins older ruff and mypy than this project uses).
TOOLS_ENV = "VLLM_FORK_UPSTREAM_TOOLS"

#: The remote hooks this runs, by hook id: the pinned tool, reporting without fixing.
REMOTE_COMMANDS: dict[str, list[str]] = {
    "ruff-check": ["ruff", "check", "--no-fix", "--output-format", "concise"],
    "ruff-format": ["ruff", "format", "--check"],
    "typos": ["typos", "--force-exclude", "--format", "brief"],
}
#: Local hooks run as `python tools/pre_commit/<script> [args] files...`.
LOCAL_ENTRY = re.compile(r"^python (tools/\S+\.py)((?: \S+)*)$")
#: A finding line most tools print: `path:line[:col]: message`.
LOCATED = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+)(?::\d+)?:?\s*(?P<message>.*)$")
#: ruff format --check's way of naming a file.
REFORMAT = re.compile(r"^(?:Would reformat|unformatted: File would be reformatted)[:\s]*(?P<file>\S+)?")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Hook:
    """One hook of the config, with what it runs and which files it takes."""

    id: str
    command: list[str]  # argv; the files follow
    files: str = ""
    exclude: str = "^$"
    types: tuple[str, ...] = ("file",)
    types_or: tuple[str, ...] = ()
    exclude_types: tuple[str, ...] = ()

    def selects(self, path: str, tags: set[str]) -> bool:
        return (
            bool(re.search(self.files, path))
            and not re.search(self.exclude, path)
            and set(self.types) <= tags
            and (not self.types_or or bool(set(self.types_or) & tags))
            and not set(self.exclude_types) & tags
        )


@dataclass(frozen=True)
class Finding:
    patch: str
    check: str
    file: str
    message: str

    def __str__(self) -> str:
        return f"{self.patch}: {self.file}: {self.check}: {self.message}"


@dataclass
class PatchResult:
    """What the hooks said about one patch: findings, and the hooks that could not run."""

    patch: str
    files: list[str]
    findings: list[Finding] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    not_run: dict[str, str] = field(default_factory=dict)  # hook id -> why


def tools_env() -> Path:
    env = os.environ.get(TOOLS_ENV)
    return Path(env) if env else Path(sys.prefix) / "upstream-checks"


def tools_bin() -> Path:
    path = tools_env() / "bin"
    if not (path / "python").exists() or not (path / "mypy").exists():
        raise ConfigError(
            f"the upstream-check tools are not installed in {tools_env()}; run scripts/setup.sh "
            f"(or: python -m venv {tools_env()} && {path}/pip install -r {REQUIREMENTS})"
        )
    return path


def pinned_versions(requirements: Path = REQUIREMENTS) -> dict[str, str]:
    pins = {}
    for line in requirements.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _listed(value: object) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, list) else ()


def load_hooks(config_text: str, python: Path) -> tuple[list[Hook], dict[str, str]]:
    """The hooks of a `.pre-commit-config.yaml` this runs, and those it cannot (id -> why)."""
    config = yaml.safe_load(config_text)
    global_exclude = config.get("exclude", "^$")
    hooks: list[Hook] = []
    skipped: dict[str, str] = {}
    for repo in config.get("repos", []):
        for spec in repo.get("hooks", []):
            hook_id = spec["id"]
            stages = spec.get("stages", config.get("default_stages", ["pre-commit"]))
            if "pre-commit" not in stages and "manual" not in stages:
                continue
            command = _command(repo, spec, python)
            if command is None:
                skipped[spec.get("alias", hook_id)] = f"{spec.get('language', 'remote')} hook, not a Python tool"
                continue
            exclude = spec.get("exclude")
            hooks.append(
                Hook(
                    id=spec.get("alias", hook_id),
                    command=command,
                    files=spec.get("files", ""),
                    exclude=f"(?:{global_exclude})|(?:{exclude})" if exclude else global_exclude,
                    types=_listed(spec.get("types")) or ("file",),
                    types_or=_listed(spec.get("types_or")),
                    exclude_types=_listed(spec.get("exclude_types")),
                )
            )
    return hooks, skipped


def _command(repo: dict, spec: dict, python: Path) -> list[str] | None:
    if repo.get("repo") != "local":
        return REMOTE_COMMANDS.get(spec["id"])
    if spec.get("language") != "python" or spec.get("pass_filenames", True) is False:
        return None
    match = LOCAL_ENTRY.match(spec["entry"])
    if not match:
        return None
    args = [a.strip('"') for a in match.group(2).split()]
    return [str(python), match.group(1), *args, *spec.get("args", [])]


def config_pins(config_text: str) -> dict[str, str]:
    """The versions the config's `# frozen: vX` comments name, by repository URL."""
    pins = {}
    repo = None
    for line in config_text.splitlines():
        match = re.match(r"^-\s*repo:\s*(\S+)", line.strip())
        if match:
            repo = match.group(1)
        frozen = re.search(r"#\s*frozen:\s*v?(\S+)", line)
        if frozen and repo:
            pins[repo] = frozen.group(1)
    return pins


def pin_problems(config_text: str, pins: dict[str, str]) -> list[str]:
    """Where requirements/upstream-checks/tools.txt disagrees with the config's frozen revs."""
    problems = []
    by_url = config_pins(config_text)
    for url, package in (("ruff-pre-commit", "ruff"), ("typos", "typos")):
        frozen = next((v for u, v in by_url.items() if u.endswith("/" + url)), None)
        if frozen and pins.get(package) != frozen:
            problems.append(
                f".pre-commit-config.yaml pins {package} {frozen}, {REQUIREMENTS.relative_to(REPO_ROOT)} "
                f"pins {pins.get(package)}: set it to {package}=={frozen} and rerun scripts/setup.sh"
            )
    for package in ("mypy", "pydantic"):
        wanted = re.search(rf'"{package}==([^"]+)"', config_text)
        if wanted and pins.get(package) != wanted.group(1):
            problems.append(
                f"the mypy hook pins {package} {wanted.group(1)}, {REQUIREMENTS.relative_to(REPO_ROOT)} "
                f"pins {pins.get(package)}: set it to {package}=={wanted.group(1)} and rerun scripts/setup.sh"
            )
    return problems


def changed_files(tree: Path, commit: str) -> list[str]:
    """The files `commit` adds or changes (renames count as added), as it leaves them."""
    listing = out(tree, "diff-tree", "--no-commit-id", "-r", "--name-only", "--diff-filter=AMRC", "-M", commit)
    return [line for line in listing.splitlines() if line]


def parse_findings(patch: str, hook: str, output: str, files: list[str]) -> list[Finding]:
    """Findings from a hook's output, each on a file the hook was given where it names one."""
    found = []
    for raw in output.splitlines():
        line = ANSI.sub("", raw).strip()
        located = LOCATED.match(line)
        if located and located.group("file") in files:
            where = f"{located.group('file')}:{located.group('line')}"
            found.append(Finding(patch, hook, where, located.group("message")))
            continue
        reformat = REFORMAT.match(line)
        if reformat:
            found.append(Finding(patch, hook, reformat.group("file") or "?", "would be reformatted"))
    return found


def _attach_reformat_paths(findings: list[Finding], output: str) -> list[Finding]:
    """ruff's concise --check output names the file on the line after `unformatted:`."""
    paths = re.findall(r"-->\s+(\S+?):\d+:\d+", ANSI.sub("", output))
    fixed = []
    for finding in findings:
        if finding.file == "?" and paths:
            finding = Finding(finding.patch, finding.check, paths.pop(0), finding.message)
        fixed.append(finding)
    return fixed


def run_hook(hook: Hook, patch: str, tree: Path, files: list[str], env: dict[str, str]) -> list[Finding]:
    proc = subprocess.run(
        [*hook.command, *files], cwd=tree, capture_output=True, text=True, errors="replace", env=env, check=False
    )
    output = proc.stdout + proc.stderr
    findings = _attach_reformat_paths(parse_findings(patch, hook.id, output, files), output)
    if proc.returncode != 0 and not findings:
        tail = " | ".join(ANSI.sub("", output).strip().splitlines()[-3:]) or f"exit status {proc.returncode}"
        findings = [Finding(patch, hook.id, files[0] if len(files) == 1 else "(files)", tail)]
    return findings


def check_patch(
    patch: str, tree: Path, commit: str, hooks: list[Hook], skipped: dict[str, str], env: dict[str, str]
) -> PatchResult:
    files = changed_files(tree, commit)
    result = PatchResult(patch, files)
    tags = {f: tags_from_path(str(tree / f)) for f in files if (tree / f).exists()}
    for hook in hooks:
        selected = [f for f in files if f in tags and hook.selects(f, tags[f])]
        if selected:
            result.ran.append(hook.id)
            result.findings += run_hook(hook, patch, tree, selected, env)
    for hook_id, why in skipped.items():
        result.not_run[hook_id] = why
    return result


def _cache_key(tree_id: str, files: list[str], tools: bytes) -> str:
    digest = hashlib.sha256(tree_id.encode() + b"\0" + "\n".join(files).encode() + b"\0" + tools)
    return digest.hexdigest()


@contextmanager
def scratch_worktree(tree: Path) -> Iterator[Path]:
    """A detached worktree of `tree`, removed (and unregistered) afterwards."""
    with tempfile.TemporaryDirectory(prefix="upstream-checks-") as tmp:
        path = Path(tmp) / "tree"
        git(tree, "worktree", "add", "--quiet", "--detach", str(path), "HEAD")
        try:
            yield path
        finally:
            git(tree, "worktree", "remove", "--force", str(path), check=False)
            git(tree, "worktree", "prune", check=False)


def check_queue(tree: Path, base: str, patches: list[str], cache: Path | None = None) -> list[PatchResult]:
    """Each patch's hook findings; commit i above `base` in `tree` applies patches[i]."""
    commits = out(tree, "rev-list", "--reverse", f"{base}..HEAD").split()
    if len(commits) != len(patches):
        raise ConfigError(
            f"{tree} has {len(commits)} commits above upstream, the series {len(patches)}; run `invoke apply`"
        )
    bindir = tools_bin()
    pins = pinned_versions()
    tools = REQUIREMENTS.read_bytes()
    cache = cache or cache_subdir("upstream-checks")
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["MYPY_CACHE_DIR"] = str(cache / "mypy")
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)  # the hooks see the checked tree, not this tool's imports
    results: list[PatchResult] = []
    pending: list[tuple[int, str, str]] = []
    for i, (patch, commit) in enumerate(zip(patches, commits)):
        key = _cache_key(out(tree, "rev-parse", f"{commit}^{{tree}}"), changed_files(tree, commit), tools)
        hit = cache / f"{key}.json"
        if hit.exists():
            results.append(_load(hit, patch))
        else:
            results.append(PatchResult(patch, []))
            pending.append((i, commit, key))
    if pending:
        with scratch_worktree(tree) as work:
            for i, commit, key in pending:
                git(work, "checkout", "--quiet", "--force", "--detach", commit)
                config = (work / ".pre-commit-config.yaml").read_text()
                problems = pin_problems(config, pins)
                if problems:
                    raise ConfigError("; ".join(problems))
                hooks, skipped = load_hooks(config, bindir / "python")
                results[i] = check_patch(patches[i], work, commit, hooks, skipped, env)
                _store(cache / f"{key}.json", results[i])
    return results


def _store(path: Path, result: PatchResult) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(result)))
    tmp.replace(path)


def _load(path: Path, patch: str) -> PatchResult:
    data = json.loads(path.read_text())
    findings = [Finding(patch, f["check"], f["file"], f["message"]) for f in data["findings"]]
    return PatchResult(patch, data["files"], findings, data["ran"], data["not_run"])


def format_table(results: list[PatchResult]) -> str:
    """Markdown: one row per patch, one column per hook that ran on any patch (findings, or '-')."""
    columns = sorted({hook for r in results for hook in r.ran})
    lines = ["| patch | files | " + " | ".join(columns) + " |", "|---|---:|" + "---:|" * len(columns)]
    for r in results:
        counts = [str(sum(f.check == c for f in r.findings)) if c in r.ran else "-" for c in columns]
        lines.append(f"| {r.patch[:60]} | {len(r.files)} | " + " | ".join(counts) + " |")
    not_run = sorted({f"{hook} ({why})" for r in results for hook, why in r.not_run.items() if _applies(hook, r)})
    if not_run:
        lines.append("")
        lines.append("Not run: " + "; ".join(not_run))
    return "\n".join(lines)


def _applies(hook: str, result: PatchResult) -> bool:
    """Whether a hook this cannot run would have had files of the patch (markdown, shell, C++)."""
    suffixes = {"markdownlint-cli2": (".md",), "shellcheck": (".sh",), "clang-format": (".cu", ".cpp", ".h", ".cuh")}
    return any(f.endswith(suffixes.get(hook, ("\0",))) for f in result.files)

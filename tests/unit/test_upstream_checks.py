"""How `invoke check --upstream` reads vLLM's pre-commit config and its hooks' output."""

from __future__ import annotations

from pathlib import Path

from vllm_fork.queue.upstream_checks import (
    REQUIREMENTS,
    load_hooks,
    parse_findings,
    pin_problems,
    pinned_versions,
)

# The shape of vLLM 0.34.0's .pre-commit-config.yaml, cut down.
CONFIG = """\
default_stages:
  - pre-commit
  - manual
exclude: 'vllm/third_party/.*'
repos:
- repo: https://github.com/astral-sh/ruff-pre-commit
  rev: f368fb366ff7f2f808dd324b83a6d32267799e19  # frozen: v0.17.2
  hooks:
  - id: ruff-check
    args: [--output-format, github, --fix]
  - id: ruff-format
    types_or: [python, pyi, jupyter]
- repo: https://github.com/crate-ci/typos
  rev: 9023c1f779400877cafdd98052113fc777e2cfdc  # frozen: v1.51.1
  hooks:
  - id: typos
    args: [--force-exclude]
- repo: https://github.com/DavidAnson/markdownlint-cli2
  rev: 341e2a331ba578029e66c2e01183e7a6b5ca9ab4  # frozen: v0.24.0
  hooks:
  - id: markdownlint-cli2
- repo: local
  hooks:
  - id: mypy
    entry: python tools/pre_commit/mypy.py "3.11"
    language: python
    types_or: [python, pyi]
    additional_dependencies: ["mypy==1.20.2", regex, "pydantic==2.13.5"]
  - id: signoff-commit
    entry: bash
    language: system
    stages: [commit-msg]
  - id: check-torch-cuda-call
    entry: python tools/pre_commit/check_torch_cuda.py
    language: python
    types: [python]
  - id: check-trust-remote-code
    entry: python tools/pre_commit/check_trust_remote_code.py
    language: python
    types: [python]
    files: ^vllm/
  - id: check-dockerignore-tracked
    entry: python tools/pre_commit/check_dockerignore_tracked.py
    language: python
    always_run: true
    pass_filenames: false
"""


def test_the_config_pins_what_the_tool_requirements_pin() -> None:
    assert pin_problems(CONFIG, pinned_versions(REQUIREMENTS)) == []
    bumped = CONFIG.replace("frozen: v0.17.2", "frozen: v0.18.0").replace("mypy==1.20.2", "mypy==1.21.0")
    problems = pin_problems(bumped, pinned_versions(REQUIREMENTS))
    assert len(problems) == 2
    assert "ruff 0.18.0" in problems[0] and "ruff==0.18.0" in problems[0]
    assert "mypy 1.21.0" in problems[1]


def test_hooks_are_the_python_ones_as_their_entries_say() -> None:
    hooks, skipped = load_hooks(CONFIG, Path("/tools/bin/python"))
    by_id = {hook.id: hook for hook in hooks}
    assert list(by_id) == [
        "ruff-check",
        "ruff-format",
        "typos",
        "mypy",
        "check-torch-cuda-call",
        "check-trust-remote-code",
    ]
    assert by_id["mypy"].command == ["/tools/bin/python", "tools/pre_commit/mypy.py", "3.11"]
    assert by_id["ruff-check"].command[:3] == ["ruff", "check", "--no-fix"]  # reports, never edits the tree
    assert "markdownlint-cli2" in skipped and "check-dockerignore-tracked" in skipped
    assert "signoff-commit" not in by_id and "signoff-commit" not in skipped  # a commit-msg hook


def test_hooks_select_files_as_pre_commit_does() -> None:
    hooks, _ = load_hooks(CONFIG, Path("python"))
    by_id = {hook.id: hook for hook in hooks}
    python = {"file", "text", "python"}
    markdown = {"file", "text", "markdown"}
    assert by_id["check-torch-cuda-call"].selects("tests/x/test_a.py", python)
    assert not by_id["check-torch-cuda-call"].selects("docs/a.md", markdown)
    assert by_id["check-trust-remote-code"].selects("vllm/a.py", python)
    assert not by_id["check-trust-remote-code"].selects("tests/a.py", python)
    assert not by_id["mypy"].selects("vllm/third_party/a.py", python)  # the config's exclude
    assert by_id["typos"].selects("docs/a.md", markdown)


def test_findings_name_the_file_and_line() -> None:
    files = ["vllm/a.py", "tests/b.py"]
    mypy = (
        "$ mypy --python-version 3.11 \n"
        'vllm/a.py:12: error: "None" not callable  [misc]\n'
        "vllm/other.py:3: error: not a file of the patch\n"
        "Found 2 errors in 2 files (checked 2 source files)\n"
    )
    (finding,) = parse_findings("0004-x.patch", "mypy", mypy, files)
    assert str(finding) == '0004-x.patch: vllm/a.py:12: mypy: error: "None" not callable  [misc]'
    cuda = "tests/b.py:7: \x1b[91merror:\x1b[0m Found torch.cuda API call. Please refer RFC ...\n"
    (finding,) = parse_findings("0004-x.patch", "check-torch-cuda-call", cuda, files)
    assert finding.file == "tests/b.py:7" and finding.message.startswith("error: Found torch.cuda")

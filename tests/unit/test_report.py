"""`invoke check --report` and the queue's policy (patches/policy.toml), on small real git repositories."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.forkrepo import UPSTREAM_FILES, ForkRepo, make_upstream_repo

from vllm_fork.core.errors import ConfigError
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export as export_queue
from vllm_fork.queue.patchfile import parse_patch
from vllm_fork.queue.privatenames import private_uses
from vllm_fork.queue.report import format_report, judge, load_policy, patch_report
from vllm_fork.queue.series import read_series

WHY = "The engine needs this in production; the default does not serve our traffic."
SIGNED = f"{WHY}\n\nSigned-off-by: A Dev <dev@example.com>"
VLLM = frozenset({"vllm"})

#: An upstream with a `vllm` package whose private names a patch may reach into.
VLLM_FILES = {
    **UPSTREAM_FILES,
    "vllm/__init__.py": "",
    "vllm/utils/__init__.py": "_private = 1\n\n\ndef helper():\n    return 2\n",
    "vllm/utils/torch_utils.py": "import threading\n\n_current_stream_tls = threading.local()\n",
    "vllm/engine.py": "def run(x):\n    return x * 2\n",
}

POLICY = """\
[limits]
max_code_lines = 5
max_message_lines = 40
signed_off_by = true
"""


@pytest.fixture
def vfork(tmp_path, cache) -> ForkRepo:
    fork = ForkRepo.create(tmp_path / "fork", make_upstream_repo(tmp_path / "upstream", VLLM_FILES))
    queue.apply(fork.root)
    return fork


def commit(fork: ForkRepo, files: dict[str, str], subject: str, body: str) -> None:
    """One commit in build/vllm adding `files` (path -> text appended)."""
    *rest, (last_path, last_text) = files.items()
    for path, text in rest:
        target = fork.tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((target.read_text() if target.exists() else "") + text)
    fork.commit_in_tree(last_path, "", last_text, subject, body)


def policy_problems(fork: ForkRepo) -> list[check_mod.Problem]:
    return [p for p in check_mod.check(fork.root) if p.kind is check_mod.Kind.POLICY]


# -- per patch: lines, tests, private names --


def test_code_added_without_tests_is_flagged(vfork):
    commit(vfork, {"vllm/engine.py": "\n\ndef triple(x):\n    return x * 3\n"}, "Add triple", WHY)
    commit(
        vfork,
        {
            "docs/engine.md": "# Engine\n\nquadruple()\n",
            "tests/test_engine.py": "def test_quadruple():\n    assert True\n",
            "vllm/engine.py": "\n\ndef quadruple(x):\n    return x * 4\n",
        },
        "Add quadruple with its test",
        WHY,
    )
    names = export_queue(tree=vfork.tree, root=vfork.root)

    review = check_mod.review(vfork.root)

    assert review.problems == []
    untested, tested = review.reports
    assert (untested.name, untested.added, untested.untested) == (names[0], {"code": 4, "tests": 0, "docs": 0}, True)
    assert (tested.added, tested.untested) == ({"code": 4, "tests": 2, "docs": 3}, False)
    rows = format_report(review.reports, review.patches, review.policy).splitlines()
    assert f"| 1 | {names[0]} | 4 | 0 | 0 | FLAGGED: no test lines | 3 | no | none | ok |" in rows
    assert f"| 2 | {names[1]} | 4 | 2 | 3 | - | 3 | no | none | ok |" in rows


def test_private_vllm_names_are_listed_with_file_line_and_test(vfork):
    code = (
        "\n\nimport torch\n\nfrom vllm.utils import _private, torch_utils\n\n\n"
        "def streamed(module: torch.nn.Module):\n"
        "    tls = torch_utils._current_stream_tls\n"
        "    return tls, _private, module._parameters, torch.Tensor._make_subclass\n"
    )
    commit(vfork, {"vllm/engine.py": code}, "Read the current stream", WHY)
    test = "from vllm.utils import torch_utils\n\n\ndef test_tls():\n    assert torch_utils._current_stream_tls\n"
    commit(vfork, {"tests/test_streams.py": test}, "Test the stream's private state", WHY)
    names = export_queue(tree=vfork.tree, root=vfork.root)

    review = check_mod.review(vfork.root)

    assert review.problems == []
    uses = review.reports[0].private
    assert [(u.name, u.qualified, u.path, u.line) for u in uses] == [
        ("vllm.utils._private", "vllm.utils._private", "vllm/engine.py", 7),
        ("torch_utils._current_stream_tls", "vllm.utils.torch_utils._current_stream_tls", "vllm/engine.py", 11),
    ]
    assert review.reports[1].private == []  # test files are not the patch's code
    text = format_report(review.reports, review.patches, review.policy)
    assert "_parameters" not in text and "_make_subclass" not in text
    assert (
        "| 1 | `torch_utils._current_stream_tls` | `vllm.utils.torch_utils._current_stream_tls` "
        "| vllm/engine.py:11 | tests/test_streams.py |"
    ) in text
    assert "| 1 | `vllm.utils._private` | `vllm.utils._private` | vllm/engine.py:7 | NO |" in text
    assert names[0] in text


def test_private_names_resolve_through_imports_only():
    source = (
        "import torch\n"
        "import vllm._custom_ops as ops\n"
        "from vllm.utils import torch_utils\n"
        "from . import base\n"
        "from .engine import _own\n"
        "\n"
        "def f(module, self):\n"
        "    torch_utils._current_stream_tls.value = None\n"
        "    getattr(torch_utils, '_by_string', None)\n"
        "    base._helper(), ops.public()\n"
        "    module._parameters, torch.Tensor._make_subclass, self._ring, torch_utils.public._inner\n"
        "    return torch_utils.__name__\n"
    )
    added = set(range(2, 13))  # line 1 untouched; the import on it still binds nothing from vLLM

    uses = private_uses(source, "vllm/offloader/engine.py", added, VLLM)

    assert [(u.name, u.line) for u in uses] == [
        ("vllm._custom_ops", 2),
        ("torch_utils._current_stream_tls", 8),
        ("torch_utils._by_string", 9),
        ("base._helper", 10),
        ("torch_utils.public._inner", 11),
    ]
    # The same uses on lines the patch did not add are upstream's business, not the patch's.
    assert private_uses(source, "vllm/offloader/engine.py", {1, 3}, VLLM) == []


# -- the policy --


def test_a_41_line_message_fails_the_policy(vfork):
    (vfork.patches / "policy.toml").write_text(POLICY)
    long_body = "\n".join(f"Line {i} of why the engine needs this." for i in range(36))
    commit(vfork, {"vllm/engine.py": "\nX = 1\n"}, "Forty lines", f"{long_body}\n\nSigned-off-by: A <a@example.com>")
    commit(
        vfork,
        {"vllm/engine.py": "\nY = 1\n"},
        "Forty-one lines",
        f"{long_body}\nOne more line.\n\nSigned-off-by: A <a@example.com>",
    )
    names = export_queue(tree=vfork.tree, root=vfork.root)

    found = policy_problems(vfork)

    assert [(p.patch, p.message.split(";")[0]) for p in found] == [
        (names[1], f"{names[1]}: a 41-line message, over 40 (max_message_lines in patches/policy.toml)")
    ]


def test_a_missing_signed_off_by_fails_the_policy(vfork):
    (vfork.patches / "policy.toml").write_text(POLICY)
    commit(vfork, {"vllm/engine.py": "\nX = 1\n"}, "Signed", SIGNED)
    commit(vfork, {"vllm/engine.py": "\nY = 1\n"}, "Not signed", WHY)
    names = export_queue(tree=vfork.tree, root=vfork.root)

    found = policy_problems(vfork)

    assert [p.patch for p in found] == [names[1]]
    assert "no Signed-off-by trailer (DCO) (signed_off_by in patches/policy.toml)" in found[0].message


def test_the_code_size_limit_and_its_explicit_exception(vfork):
    (vfork.patches / "policy.toml").write_text(POLICY)
    big = "".join(f"\nZ{i} = {i}" for i in range(5)) + "\n"  # 6 added code lines, over 5
    commit(vfork, {"tests/test_z.py": "def test_z():\n    pass\n", "vllm/engine.py": big}, "Add Zs", SIGNED)
    (name,) = export_queue(tree=vfork.tree, root=vfork.root)

    assert [p.message.split(";")[0] for p in policy_problems(vfork)] == [
        f"{name}: 6 added code lines, over 5 (max_code_lines in patches/policy.toml)"
    ]

    exception = f'\n[[exception]]\npatch = "{name}"\nlimit = "max_code_lines"\nreason = "split pending (issue 43)"\n'
    (vfork.patches / "policy.toml").write_text(POLICY + exception)
    review = check_mod.review(vfork.root)
    assert review.problems == []
    report = format_report(review.reports, review.patches, review.policy)
    assert 'exception "split pending (issue 43)": 6 added code lines, over 5' in report
    assert "code lines <= 5, message lines <= 40, Signed-off-by required" in report


def test_stale_and_unknown_exceptions_are_reported_not_failed(vfork):
    """A rebase that drops a patch must not stop on its exception: stale ones are listed."""
    commit(vfork, {"tests/test_z.py": "def test_z():\n    pass\n", "vllm/engine.py": "\nZ = 1\n"}, "Add Z", SIGNED)
    (name,) = export_queue(tree=vfork.tree, root=vfork.root)
    stale = f'[[exception]]\npatch = "{name}"\nlimit = "max_code_lines"\nreason = "was big"\n'
    gone = '[[exception]]\npatch = "0009-gone.patch"\nlimit = "signed_off_by"\nreason = "old"\n'
    (vfork.patches / "policy.toml").write_text(f"{POLICY}\n{stale}\n{gone}")

    assert policy_problems(vfork) == []
    review = check_mod.review(vfork.root)
    report = format_report(review.reports, review.patches, review.policy)
    assert f"patches/policy.toml: {name} no longer breaks max_code_lines: remove its exception" in report
    assert "patches/policy.toml: an exception names 0009-gone.patch, which is not in the queue: remove it" in report


def test_an_exception_survives_a_renumbering(vfork):
    """A rebase exports a patch under a new number: its exception, by name, still holds."""
    commit(
        vfork, {"tests/test_z.py": "def test_z():\n    pass\n", "vllm/engine.py": "A = 1\nB = 2\n" * 5}, "Add Z", SIGNED
    )
    (name,) = export_queue(tree=vfork.tree, root=vfork.root)
    renumbered = "0007-" + name.split("-", 1)[1]
    (vfork.patches / "policy.toml").write_text(
        f'{POLICY}\n[[exception]]\npatch = "{renumbered}"\nlimit = "max_code_lines"\nreason = "split pending"\n'
    )
    assert policy_problems(vfork) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[limits]\nmax_lines = 3\n", "unknown: max_lines"),
        ("[limits]\nmax_code_lines = -1\n", "max_code_lines must be a whole number"),
        ("[limits]\nsigned_off_by = 'yes'\n", "signed_off_by must be true or false"),
        ('[[exception]]\npatch = "p"\nlimit = "max_code_lines"\n', "lacks `reason"),
        ('[[exception]]\npatch = "p"\nlimit = "size"\nreason = "r"\n', "unknown limit 'size'"),
        ("[limits\n", "not valid TOML"),
    ],
)
def test_a_malformed_policy_is_a_config_error_naming_the_file(tmp_path, text, expected):
    (tmp_path / "policy.toml").write_text(text)
    with pytest.raises(ConfigError, match="policy.toml") as err:
        load_policy(tmp_path)
    assert expected in str(err.value)


def test_without_a_policy_file_nothing_is_enforced(vfork):
    commit(vfork, {"vllm/engine.py": "".join(f"\nZ{i} = {i}" for i in range(50))}, "Big and unsigned", WHY)
    export_queue(tree=vfork.tree, root=vfork.root)
    review = check_mod.review(vfork.root)
    assert review.problems == [] and review.policy.describe() == "policy: none (no patches/policy.toml)"


def test_the_real_queue_keeps_the_real_policy():
    """The committed queue passes its policy with no exceptions: every patch within 600 code
    lines and 40 message lines, signed off (issue 60 split the two patches that were over)."""
    files = read_series(REPO_ROOT / "patches")
    patches = [parse_patch(p) for p in files]
    policy = load_policy(REPO_ROOT / "patches")
    reports = [patch_report(i, p) for i, p in enumerate(patches, 1)]

    assert judge(reports, policy, [p.name for p in files]) == []
    assert (policy.max_code_lines, policy.max_message_lines, policy.signed_off_by) == (600, 40, True)
    assert policy.exemptions == ()
    assert [(r.index, breach.limit) for r in reports for breach, _ in r.excused] == []
    assert all(r.added["code"] <= 600 for r in reports)
    assert all(r.message.lines <= 40 and r.message.signed_off for r in reports)


def test_check_takes_report():
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "check", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert "--report" in proc.stdout

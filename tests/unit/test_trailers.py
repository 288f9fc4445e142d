"""The commit message's trailers, as git reads them: only the body's last paragraph holds any.

Each message is committed in a real repository and exported by `invoke export` (git
format-patch); git's own `interpret-trailers --parse` says which lines are trailers.
"""

from __future__ import annotations

import pytest
from support.forkrepo import sh

from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export as export_queue
from vllm_fork.queue.patchfile import parse_patch

BODIES = {
    "labelled-paragraphs": "Why: the default is wrong for production deployments.\n\nNote: measured on the H200.",
    "labelled-then-trailers": "Why: the default is wrong for production deployments.\n\nSigned-off-by: A <a@example.com>",
    "text-then-trailers": "Users need this for production deployments.\n\nSigned-off-by: A <a@example.com>\nCo-authored-by: B <b@example.com>",
    "mostly-trailers-with-a-git-one": "The default is wrong for production deployments.\n\nReviewed-by: B <b@example.com>\nSigned-off-by: A <a@example.com>\nand a remark the reviewer added",
    "trailer-only": "Signed-off-by: A <a@example.com>",
    "mixed-last-paragraph": "Users need this.\n\nFixes: the default\nwhich is wrong for production deployments",
}


def exported(fork, body: str):
    queue.apply(fork.root)
    fork.commit_in_tree("mini/config.py", "OPTION_3 = 3\n", "OPTION_3 = 30\n", "Raise option 3", body)
    (name,) = export_queue(tree=fork.tree, root=fork.root)
    return parse_patch(fork.patches / name)


def git_sees_a_trailer_block(cwd, message: str) -> bool:
    """Ask git: a new trailer joins the last paragraph only when that paragraph is a trailer block."""
    added = sh(cwd, "git", "interpret-trailers", "--trailer", "X-Probe: 1", input=message)
    return "\n\nX-Probe: 1" not in added


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_why_is_the_body_without_the_block_git_calls_trailers(fork, body):
    patch = exported(fork, body)
    paragraphs = patch.body.split("\n\n")
    if git_sees_a_trailer_block(fork.root, f"{patch.subject}\n\n{patch.body}\n"):
        assert patch.why == "\n\n".join(paragraphs[:-1])
    else:
        assert patch.why == patch.body


def test_a_labelled_paragraph_before_the_trailers_is_the_why(fork):
    patch = exported(fork, BODIES["labelled-then-trailers"])
    assert patch.why == "Why: the default is wrong for production deployments."
    assert check_mod.check(fork.root) == []


def test_check_accepts_labelled_paragraphs(fork):
    exported(fork, BODIES["labelled-paragraphs"])
    assert check_mod.check(fork.root) == []


def test_check_rejects_a_body_of_trailers_only(fork):
    patch = exported(fork, BODIES["trailer-only"])
    problems = check_mod.check(fork.root)
    assert [(p.kind, p.patch) for p in problems] == [(check_mod.Kind.MESSAGE, patch.path.name)]
    assert "no body saying why" in problems[0].message

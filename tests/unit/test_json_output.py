"""`--json`: each task's document, made from what the task's lower layer returns on real
inputs, is valid against its documented schema (vllm_fork/cli/schemas/)."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
from support.buildtrees import commit, fork_root, make_tree
from support.rebase_world import isolate, sh, two_patch_world

from vllm_fork.cli import jsonout
from vllm_fork.cli.build import key_explanation
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export as export_queue
from vllm_fork.queue.status import status
from vllm_fork.rebase import run as rebase

WHY = "The engine needs this for production; the default does not serve our traffic."
NAMES = ("status", "verify", "ops-key", "check", "rebase-survey")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def valid(name: str, data: dict) -> dict:
    """The document as the task prints it, read back, checked against its schema."""
    doc = json.loads(json.dumps(jsonout.document(name, data)))
    jsonschema.validate(doc, jsonout.schema(name))
    assert doc["schema"] == jsonout.schema(name)["$id"] == f"vllm-fork/{name}/{jsonout.VERSION}"
    return doc


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_is_a_valid_json_schema(name):
    jsonschema.Draft202012Validator.check_schema(jsonout.schema(name))


def test_status_of_this_checkout_as_the_command_prints_it():
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "status", "--json"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    doc = json.loads(proc.stdout)  # stdout holds the document and nothing else
    jsonschema.validate(doc, jsonout.schema("status"))
    listed = (REPO_ROOT / "patches" / "series").read_text().split()
    assert [p["name"] for p in doc["patches"]] == listed


def test_status_of_a_fork_without_a_tree_and_with_an_unreadable_patch(fork):
    (fork.patches / "0001-garbled.patch").write_text("not a patch\n")
    (fork.patches / "series").write_text("0001-garbled.patch\n")
    doc = valid("status", jsonout.status_document(status(fork.root)))
    assert doc["made"] is False and doc["head"] == ""
    assert doc["patches"][0]["error"] and doc["patches"][0]["files"] == []


def test_check_of_a_sound_queue(fork):
    queue.apply(fork.root)
    fork.commit_in_tree("mini/engine.py", "return x * 2", "return x * 3", "Triple in run()", WHY)
    export_queue(tree=fork.tree, root=fork.root)
    doc = valid("check", jsonout.check_document(check_mod.review(fork.root)))
    assert doc["ok"] is True and doc["problems"] == []
    assert doc["patches"][0]["added"]["code"] == 1 and doc["patches"][0]["private"] == []


def test_check_of_a_queue_with_problems(fork):
    queue.apply(fork.root)
    fork.commit_in_tree("mini/engine.py", "return x * 2", "return helper(x)", "Use the helper", "short")
    export_queue(tree=fork.tree, root=fork.root)
    (fork.patches / "policy.toml").write_text("[limits]\nsigned_off_by = true\n")
    doc = valid("check", jsonout.check_document(check_mod.review(fork.root)))
    assert doc["ok"] is False
    assert {p["kind"] for p in doc["problems"]} == {"message", "self-contained", "policy"}
    assert doc["patches"][0]["breaches"][0]["limit"] == "signed_off_by"


def test_ops_key_with_and_without_explain(tmp_path):
    root = fork_root(tmp_path / "fork")
    tree = make_tree(root / "build" / "vllm")
    commit(tree, {"csrc/ops.cu": "// changed kernel\n"}, "a kernel change")
    found = key_explanation(root)
    doc = valid("ops-key", found)
    assert doc["upstream"]["same"] is False and doc["artifact"] is None
    assert doc["patches_touching_inputs"] == [] or doc["patches_touching_inputs"][0]["paths"]
    valid("ops-key", {"key": found["key"], "tree_commit": found["tree_commit"]})
    with pytest.raises(jsonschema.ValidationError):  # --explain's fields come together
        valid("ops-key", {"key": found["key"], "tree_commit": found["tree_commit"], "inputs": []})


def test_rebase_survey(tmp_path):
    w = two_patch_world(tmp_path)
    sh(w.remote, "git", "tag", "-a", "v1.1.0", "-m", "1.1.0")
    survey, _, path = rebase.survey_only(w.root, to="1.1.0")
    doc = valid("rebase-survey", jsonout.survey_document(survey, path))
    assert doc["from_version"] == "1.0.0" and doc["to_version"] == "1.1.0"
    assert [f["outcome"] for f in doc["forecasts"]] == ["clean", "clean"] and doc["failing"] == []

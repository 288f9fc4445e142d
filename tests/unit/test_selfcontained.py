"""`invoke check`: every prefix of the queue stands on its own (names and imports), on small real repos."""

from __future__ import annotations

import time

from support.forkrepo import UPSTREAM_FILES, ForkRepo, make_upstream_repo

from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export as export_queue
from vllm_fork.queue.selfcontained import undefined_names

WHY = "The engine needs this for production; the default does not serve our traffic."


def prefix_messages(fork) -> list[str]:
    return [p.message for p in check_mod.check(fork.root) if p.kind is check_mod.Kind.PREFIX]


def test_a_patch_using_a_name_only_a_later_patch_defines_fails_check(fork):
    queue.apply(fork.root)
    # Patch 1 calls new_copy_stream(), which only patch 2 defines (in the same module).
    fork.commit_in_tree("mini/engine.py", "return x * 2", "return new_copy_stream(x) * 2", "Use a copy stream", WHY)
    fork.commit_in_tree("mini/engine.py", "", "\n\ndef new_copy_stream(x):\n    return x\n", "Add the helper", WHY)
    names = export_queue(tree=fork.tree, root=fork.root)

    started = time.monotonic()
    found = check_mod.check(fork.root)
    assert time.monotonic() - started < 10

    assert [p.message for p in found] == [
        f"{names[0]}: mini/engine.py:2: undefined name 'new_copy_stream' (defined only by a later patch: {names[1]})"
    ]
    assert found[0].kind is check_mod.Kind.PREFIX and found[0].patch == names[0]


def test_imports_of_a_module_or_name_a_later_patch_adds_fail_check(fork):
    queue.apply(fork.root)
    fork.commit_in_tree(
        "mini/engine.py",
        "def run(x):",
        "from mini.streams import ring\nfrom mini.config import OPTION_99\nfrom . import config\n\n\ndef run(x):",
        "Stream through the ring",
        WHY,
    )
    fork.commit_in_tree("mini/streams.py", "", "def ring():\n    return 3\n", "Add the ring", WHY)
    fork.commit_in_tree("mini/config.py", "", "OPTION_99 = 99\n", "Add option 99", WHY)
    names = export_queue(tree=fork.tree, root=fork.root)

    assert prefix_messages(fork) == [
        f"{names[0]}: mini/engine.py:1: import of module 'mini.streams', which does not exist at this point "
        f"(defined only by a later patch: {names[1]})",
        f"{names[0]}: mini/engine.py:2: 'OPTION_99' imported from 'mini.config', which does not define it "
        f"at this point (defined only by a later patch: {names[2]})",
    ]


def test_only_what_a_patch_introduces_counts(tmp_path, cache):
    # Upstream itself has an undefined name and a broken import in engine.py: not the patch's doing.
    buggy = dict(UPSTREAM_FILES)
    buggy["mini/engine.py"] = "import mini.gone\n\n\ndef run(x):\n    return x * 2 + upstream_bug\n"
    fork = ForkRepo.create(tmp_path / "fork", make_upstream_repo(tmp_path / "upstream", buggy))
    queue.apply(fork.root)
    fork.commit_in_tree("mini/engine.py", "x * 2", "x * 3 + also_missing", "Triple in run()", WHY)
    names = export_queue(tree=fork.tree, root=fork.root)

    assert prefix_messages(fork) == [f"{names[0]}: mini/engine.py:5: undefined name 'also_missing'"]


def test_undefined_names_knows_scopes_builtins_and_globals():
    source = (
        "from __future__ import annotations\n"
        "import os\n"
        "X = 1\n"
        "def f(a: Unchecked) -> None:\n"
        "    global G\n"
        "    G = 2\n"
        "    ys = [i for i in range(3) if in_comprehension]\n"
        "    return os.sep, X, G, late, __file__, print, missing\n"
        "class C:\n"
        "    z = X\n"
        "    def m(self):\n"
        "        return z\n"
        "late = 3\n"
    )
    assert undefined_names(source, "a.py") == {"in_comprehension": 7, "missing": 8, "z": 12}
    assert undefined_names("def f(:\n", "a.py") == "line 1: invalid syntax"

"""A pin is checked against what the upstream tree it fetched says it is (PKG-INFO, vllm/_version.py, the tag)."""

from vllm_fork.upstream.identity import ReleaseIdentity, pin_mismatches
from vllm_fork.upstream.pin import Artifact, Pin


def test_a_pin_is_checked_against_what_its_tree_says():
    none = Artifact("", "")
    pin = Pin("9.9.9", "v9.9.9", "abc1234", "pypi", "", none, none)
    sdist = ReleaseIdentity("0.34.0", "0.34.0", "62d4bc3c7")
    problems = pin_mismatches(pin, sdist)
    assert any("PKG-INFO says 0.34.0" in p for p in problems)
    assert any("vllm/_version.py says 0.34.0" in p for p in problems)
    assert any('tag = "v9.9.9"' in p for p in problems) and any("62d4bc3c7" in p for p in problems)
    git_tree = ReleaseIdentity(None, None, None)  # a git checkout: neither file
    assert pin_mismatches(pin.with_changes(tag="v0.34.0"), git_tree) == [
        'version = "9.9.9", but the tag fetched is v0.34.0 (release 0.34.0)'
    ]
    assert pin_mismatches(pin.with_changes(version="0.34.0", tag="v0.34.0", commit="62d4bc3"), sdist) == []

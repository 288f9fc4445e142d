"""Failures are typed: callers and tests tell them apart by class, not by message text."""

import pytest

from vllm_fork.core.errors import ConfigError, ForkError, GitError
from vllm_fork.core.git import git
from vllm_fork.upstream.pin import load_pin


def test_a_malformed_pin_is_a_config_error_naming_the_file(tmp_path):
    (tmp_path / "upstream.toml").write_text("version = \n")
    with pytest.raises(ConfigError, match="upstream.toml is not valid TOML") as info:
        load_pin(tmp_path)
    assert info.value.exit_code == 1 and isinstance(info.value, ForkError)


def test_a_failed_git_command_is_a_git_error_with_its_output(tmp_path):
    with pytest.raises(GitError, match="not a git repository"):
        git(tmp_path, "rev-parse", "HEAD")

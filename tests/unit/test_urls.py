"""redact_url: a URL's password never reaches a message; everything else in it stays readable."""

import pytest

from vllm_fork.core.errors import ConfigError
from vllm_fork.core.git import git
from vllm_fork.core.image_ref import parse_remote
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.core.urls import redact_url
from vllm_fork.rebase.blame import fetch_history
from vllm_fork.upstream.pin import load_pin


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("https://alice:s3cr3t@idx.example/simple/", "https://alice:****@idx.example/simple/"),
        ("http://alice:p@ss@127.0.0.1:8080/f?x=1", "http://alice:****@127.0.0.1:8080/f?x=1"),  # an unescaped @
        ("https://ghp_token@idx.example/", "https://****@idx.example/"),  # a user part alone may be a token
        ("oci://u:pw@registry:5000/repo", "oci://u:****@registry:5000/repo"),
        ("http://a:b@h", "http://a:****@h"),
        ("https://idx.example/simple/", "https://idx.example/simple/"),
        ("file:///tmp/x@y/z", "file:///tmp/x@y/z"),
        ("write to alice@example.com", "write to alice@example.com"),
    ],
)
def test_a_url_shows_its_user_but_never_its_password(given, shown):
    assert redact_url(given) == shown


def test_every_url_in_a_message_is_masked():
    said = "from http://a:one@h/x: refused (redirected to https://b:two@g/y)"
    assert redact_url(said) == "from http://a:****@h/x: refused (redirected to https://b:****@g/y)"


def test_a_survey_that_cannot_fetch_history_does_not_show_the_remotes_password(tmp_path):
    """`rebase --survey` puts why it could not blame into its report and its JSON."""
    git(tmp_path, "init", "--quiet")
    pin = load_pin(REPO_ROOT)
    said = fetch_history(tmp_path, "http://alice:s3cr3t@127.0.0.1:9/vllm.git", pin, pin.with_changes(tag="v9.9.9"))
    assert "failed" in said and "alice:****@127.0.0.1:9" in said
    assert "s3cr3t" not in said


def test_an_oci_remote_with_a_login_is_refused_without_showing_it():
    with pytest.raises(ConfigError) as refused:
        parse_remote("oci://alice:s3cr3t@registry.example:5000/team/ops")
    assert "docker login registry.example:5000" in str(refused.value)
    assert "s3cr3t" not in str(refused.value)

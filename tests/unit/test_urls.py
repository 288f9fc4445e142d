"""redact_url: a URL's password never reaches a message; everything else in it stays readable."""

import pytest

from vllm_fork.core.urls import redact_url


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

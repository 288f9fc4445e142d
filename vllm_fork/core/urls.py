"""URLs made safe to show: credentials in them are masked before any message, log line or file."""

from __future__ import annotations

import re

# scheme://user:password@ (the password may hold an unescaped `@`: the authority ends at the last one)
_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<user>[^/?#@:\s]*)(?P<password>:[^/?#\s]*)?@", re.I)


def redact_url(text: str) -> str:
    """`text` (a URL, or a message holding URLs) with each URL's password shown as `****`, as pip
    shows them (`https://alice:****@host/`); a user part alone (a token) is masked whole."""
    return _USERINFO.sub(
        lambda m: f"{m['scheme']}{m['user']}:****@" if m["password"] is not None else f"{m['scheme']}****@", text
    )

"""MkDocs hooks: the site's pages are the repository's own Markdown, README.md as the index.

MkDocs refuses a docs_dir that is the config file's own directory; mkdocs-same-dir lifts that
check the same way, but its releases now require another program (properdocs), so the two
lines live here.
"""

from __future__ import annotations

import os

from mkdocs.config import config_options


def _allow_config_dir(self, config, key_name):
    config[key_name] = os.path.join(config[key_name], "")


config_options.DocsDir.post_validation = _allow_config_dir  # type: ignore[method-assign]

"""MkDocs hooks: the site's pages are the repository's own Markdown, README.md as the index.

MkDocs refuses a docs_dir that is the config file's own directory, and a site_dir inside the
docs_dir. Here both are wanted: the pages link to the repository's files as GitHub shows them,
and the site goes to build/site, which mkdocs.yml's exclude_docs leaves out of the sources.
mkdocs-same-dir lifts these checks the same way, but its releases now require another
program (properdocs), so the few lines live here.
"""

from __future__ import annotations

import os

from mkdocs.config import config_options
from mkdocs.config.base import ValidationError


def _docs_dir_may_be_the_config_dir(self, config, key_name):
    config[key_name] = os.path.join(config[key_name], "")


def _site_dir_outside_the_sources(self, config, key_name):
    docs_dir, site_dir = config["docs_dir"], config[key_name]
    if (docs_dir + os.sep).startswith(site_dir.rstrip(os.sep) + os.sep):
        raise ValidationError(f"the sources ({docs_dir}) must not be inside site_dir ({site_dir})")


config_options.DocsDir.post_validation = _docs_dir_may_be_the_config_dir  # type: ignore[method-assign]
config_options.SiteDir.post_validation = _site_dir_outside_the_sources  # type: ignore[method-assign]

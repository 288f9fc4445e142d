"""Fixtures of the integration tests: a real Docker engine and a real registry."""

from support.dockerd import dockerd  # noqa: F401 (a fixture)
from support.registry import registry  # noqa: F401 (a fixture)

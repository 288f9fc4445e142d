"""Scratch folders for module-scoped fixtures: a fork with its tree and wheel is hundreds of MB.

pytest keeps `tmp_path_factory` folders until the session ends (pyproject's retention policy
only removes a passing test's own `tmp_path`); these go when their module is done, so the
suite's disk use is one module's, not the sum of all (CI's disk filled up once).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def module_scratch(factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    path = factory.mktemp(name)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)

"""Run at start-up by every Python process the CPU tests' vLLM starts itself (`import_on_cpu`
puts this folder on their PYTHONPATH): such a child imports the tree under test as its parent
does, with the same torchvision stand-in. Lazy: only a child that imports torchvision pays."""

from __future__ import annotations

import importlib.abc
import sys


class TorchvisionStandIn(importlib.abc.MetaPathFinder):
    """Declares torchvision's two op schemas just before its first import, then steps aside."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            from vllm_fork_testkit.vllm_tree import let_torchvision_import_without_its_ops

            let_torchvision_import_without_its_ops()
        return None


sys.meta_path.insert(0, TorchvisionStandIn())

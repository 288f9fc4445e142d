"""The patches' own tests, as they live in the patched vLLM tree, run on the CPU.

Patch 0001 carries its tests where upstream keeps them
(`tests/model_executor/offloader/` in the vLLM tree). This module imports
them from the tree under test (see conftest.py), so pytest collects each of
their tests here; the ones that need CUDA skip themselves and run on the GPU
machine (`tests/gpu`).
"""

from tests.config.test_mm_processor_cache_shm import *  # noqa: F403
from tests.model_executor.offloader.test_offload_towers_option import *  # noqa: F403
from tests.model_executor.offloader.test_tower_streaming import *  # noqa: F403
from tests.model_executor.offloader.test_tower_streaming_qwen3_vl import *  # noqa: F403

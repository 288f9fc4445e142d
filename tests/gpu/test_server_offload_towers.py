"""`vllm serve --offload-towers` with the `openai` client, over HTTP.

Also measures the mm-cache patch's claim about the multimodal processor cache: the
cache is filled with distinct images on a live server, once per cache type,
and the resident memory of the API server and the engine core is read before
and after. Figures go to `$VLLM_FORK_RESULTS` (when set).
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from engine_runs import record

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

MiB = 1 << 20
GiB = 1 << 30


@pytest.fixture(scope="module")
def checkpoint(checkpoints) -> Path:
    return checkpoints["qwen3_vl"]


def chat(client, model: str, image_url: str, max_tokens: int = 8):
    return client.chat.completions.create(
        model=model,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image_url}},
                    {"type": "text", "text": "Describe the picture in one sentence."},
                ],
            }
        ],
        max_tokens=max_tokens,
        temperature=0.0,
    )


def test_serve_streams_towers_for_concurrent_image_chats(checkpoint, tmp_path):
    import openai
    from server import vllm_serve

    from vllm_fork_testkit.vlm_checkpoint import image_data_url, image_of_tokens

    options = {"offload_backend": "prefetch", "offload_towers": True}
    with vllm_serve(checkpoint, options=options, log=tmp_path / "serve.log") as server:
        log = server.log.read_text()
        assert "Streaming tower 'visual'" in log
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")
        model = client.models.list().data[0].id
        sizes = [64, 256, 1024, 2223, 512, 128, 768, 1536]
        urls = [image_data_url(image_of_tokens(n, seed=i)) for i, n in enumerate(sizes)]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(urls)) as pool:
            replies = list(pool.map(lambda url: chat(client, model, url), urls))
        elapsed = time.perf_counter() - started
        for size, reply in zip(sizes, replies):
            assert reply.choices[0].finish_reason in ("stop", "length")
            assert reply.usage.prompt_tokens >= size
            assert reply.usage.completion_tokens >= 1
        status, _ = server.get("/health")
        assert status == 200
        status, metrics = server.get("/metrics")
        assert status == 200
        assert "vllm:request_success_total" in metrics
        success = [
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("vllm:request_success_total{")
        ]
        assert sum(success) >= len(urls)
        rss = server.rss()
    record(
        "server_offload_towers.json",
        {
            "concurrent_requests": len(urls),
            "image_tokens": sizes,
            "prompt_tokens": [r.usage.prompt_tokens for r in replies],
            "wall_seconds": elapsed,
            "rss_bytes": rss,
        },
    )


@pytest.mark.parametrize("cache_type", ["lru", "shm"])
def test_mm_processor_cache_host_memory_per_process(checkpoint, tmp_path, cache_type):
    """Fill a 2 GiB processor cache with distinct images; read RSS per process."""
    import openai
    from server import vllm_serve

    from vllm_fork_testkit.vlm_checkpoint import image_data_url, image_of_tokens

    cache_gb = 2
    options = {
        "mm_processor_cache_gb": cache_gb,
        "mm_processor_cache_type": cache_type,
        "limit_mm_per_prompt": {"image": 1},
    }
    log = tmp_path / f"serve-{cache_type}.log"
    with vllm_serve(checkpoint, options=options, log=log) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")
        model = client.models.list().data[0].id
        # The largest image the processor takes (4096 tokens): about 100 MB
        # of processed pixels each; 30 of them overfill the 2 GiB cache.
        chat(client, model, image_data_url(image_of_tokens(4096, seed=999, smooth=True)))
        before = server.rss()
        shm_before = shutil.disk_usage("/dev/shm").used
        samples = []
        for i in range(30):
            chat(client, model, image_data_url(image_of_tokens(4096, seed=i, smooth=True)), 1)
            if i % 5 == 4:
                samples.append(
                    {"images": i + 1, "rss_bytes": server.rss(), "dev_shm_used": shutil.disk_usage("/dev/shm").used}
                )
        after = server.rss()
        shm_after = shutil.disk_usage("/dev/shm").used
    growth = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    result = {
        "cache_type": cache_type,
        "mm_processor_cache_gb": cache_gb,
        "images": 30,
        "image_tokens": 4096,
        "rss_before_bytes": before,
        "rss_after_bytes": after,
        "rss_growth_bytes": growth,
        "dev_shm_growth_bytes": shm_after - shm_before,
        "samples": samples,
    }
    record(f"mm_processor_cache_{cache_type}.json", result)
    print(
        f"\n[cache {cache_type}] RSS growth per process (MiB): "
        + ", ".join(f"{k} {v / MiB:.0f}" for k, v in growth.items())
        + f"; /dev/shm +{(shm_after - shm_before) / MiB:.0f} MiB"
    )
    # The cache is bounded: no process grew by much more than the budget.
    assert max(growth.values()) <= cache_gb * GiB * 1.3

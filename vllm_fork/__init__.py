"""vllm-fork: a maintained fork of vLLM kept as a patch series on a pinned release."""

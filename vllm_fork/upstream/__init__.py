"""The pinned vLLM release: the pin, its sources (PyPI sdist or git tag), downloads, the package index."""

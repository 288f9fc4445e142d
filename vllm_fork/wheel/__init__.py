"""Building and verifying the fork's wheel: the fast and precompiled routes, metadata, provenance."""

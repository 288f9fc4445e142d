"""Helpers the tests share: real git repos, an HTTP server, an OCI registry, build trees."""

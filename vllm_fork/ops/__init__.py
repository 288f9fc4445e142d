"""Compiled ops: which inputs the compiled build reads, their key, the artifact cache and its remotes."""

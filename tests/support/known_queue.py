"""What `invoke check` is known to find in this repository's real queue, until the queue is fixed.

Issue 42: patch 0001 calls `new_copy_stream()`, which only patch 0004 defines, so the tree
after 0001 alone does not stand. Its fix comes with the move onto vLLM 0.34.0 (patches/
is that change's to edit). The real-queue tests accept exactly this finding and nothing
else; once the queue is fixed none is found, and this file can go.
"""

from __future__ import annotations


def is_known(message: str) -> bool:
    return (
        message.startswith("0001-Offload-Stream-multimodal-encoder-towers")
        and "undefined name 'new_copy_stream'" in message
        and "defined only by a later patch: 0004-" in message
    )


def unexpected(problems) -> list[str]:
    """The messages of `problems` (check.Problem or str) that are not the known finding."""
    messages = [getattr(p, "message", p) for p in problems]
    return [m for m in messages if not is_known(m)]

"""Seeding the ops cache from the official wheel of the pinned release.

The artifact holds exactly the members vLLM's precompiled path extracts, as
`ops-cache/precompiled-members.toml` lists them: the compiled `.so` files,
`vllm/vllm-rs`, and the vendored trees under `vllm/third_party/...` and
`vllm/vllm_flash_attn/...`. The precompiled route checks this list against what
setup.py actually extracts on every run.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.fs import sha256_file
from vllm_fork.core.log import LogFn
from vllm_fork.core.log import info as log_info
from vllm_fork.core.zipraw import copy_raw
from vllm_fork.ops.inputs import load_precompiled_members
from vllm_fork.upstream.download import fetch
from vllm_fork.upstream.pin import Pin


def is_precompiled_member(name: str) -> bool:
    """Whether vLLM's precompiled path extracts this wheel member (`ops-cache/precompiled-members.toml`)."""
    return load_precompiled_members().covers(name)


@dataclass(frozen=True)
class Seeded:
    path: Path  # a temp file in `workdir`, to be stored by the cache
    members: int
    compressed_bytes: int
    seconds: float
    record: dict[str, tuple[str, int]] | None = None  # from the source wheel's RECORD


def _wheel_record(src_zip: zipfile.ZipFile, names: set[str]) -> dict[str, tuple[str, int]] | None:
    """sha256 and size of `names` from the wheel's RECORD; None if it lacks any of them."""
    records = [n for n in src_zip.namelist() if n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        return None
    found = {}
    for row in csv.reader(io.StringIO(src_zip.read(records[0]).decode())):
        if len(row) == 3 and row[0] in names and row[1].startswith("sha256="):
            found[row[0]] = (row[1].removeprefix("sha256="), int(row[2]))
    return found if set(found) == names else None


def make_artifact(wheel: Path, workdir: Path, log: LogFn = log_info) -> Seeded:
    """Raw-copy the precompiled members of `wheel` into a new zip in `workdir`."""
    start = time.perf_counter()
    with zipfile.ZipFile(wheel) as src_zip:
        infos = [i for i in src_zip.infolist() if is_precompiled_member(i.filename)]
        record = _wheel_record(src_zip, {i.filename for i in infos})
        # Sizes must agree with the central directory, or the RECORD is not trusted.
        if record and any(record[i.filename][1] != i.file_size for i in infos):
            record = None
    fd, tmp_name = tempfile.mkstemp(dir=workdir, prefix=".seed.", suffix=".zip")
    tmp = Path(tmp_name)

    os.close(fd)

    try:
        total = sum(i.compress_size for i in infos)
        log(f"seeding: copying {len(infos)} members ({total >> 20} MiB compressed) raw from {wheel.name}")
        with open(wheel, "rb") as src, zipfile.ZipFile(tmp, "w") as dst:
            copied = copy_raw(src, infos, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Seeded(tmp, len(infos), copied, time.perf_counter() - start, record)


def official_wheel(pin: Pin) -> Path:
    """The pinned release's official wheel, downloaded through pip's index and verified."""
    return fetch("vllm", pin.wheel.filename, pin.wheel.sha256)


def seed_provenance(pin: Pin, wheel: Path, seeded: Seeded) -> dict:
    return {
        "source": "seed",
        "from_wheel": {"filename": pin.wheel.filename, "sha256": pin.wheel.sha256},
        "upstream": {"version": pin.version, "tag": pin.tag, "commit": pin.commit},
        "members": seeded.members,
    }


__all__ = ["is_precompiled_member", "make_artifact", "official_wheel", "seed_provenance", "sha256_file"]

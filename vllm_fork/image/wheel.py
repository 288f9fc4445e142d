"""The fork's wheel as the image takes it: the wheel and its provenance record, checked and staged."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_fork.core.errors import ForkError
from vllm_fork.core.fs import link_or_copy
from vllm_fork.upstream.pin import Pin
from vllm_fork.wheel.provenance import provenance_path

#: Wheel platform tag -> Docker platform. The wheel decides what the image can run on.
PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}

_WHEEL_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)


@dataclass(frozen=True)
class ForkWheel:
    """A patched wheel in dist/ and its provenance record (as `invoke build` wrote it)."""

    path: Path
    record: dict

    def _tags(self) -> re.Match[str]:
        match = _WHEEL_RE.match(self.path.name)
        if match is None:
            raise ForkError(f"{self.path.name}: not a wheel file name (name-version-python-abi-platform.whl)")
        return match

    @property
    def record_path(self) -> Path:
        return provenance_path(self.path)

    @property
    def version(self) -> str:
        return self._tags()["version"]

    @property
    def platform(self) -> str:
        """The Docker platform the wheel runs on, from its platform tag."""
        tag = self._tags()["platform"]
        for arch, platform in PLATFORMS.items():
            if tag.endswith(arch):
                return platform
        raise ForkError(f"{self.path.name}: no Linux platform for wheel platform tag {tag!r}")


def _required(record: dict, dotted: str, where: Path) -> Any:
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ForkError(
                f"{where} lacks `{dotted}`: it is not a provenance record `invoke build` wrote. "
                "Run `invoke build` again."
            )
        value = value[key]
    return value


def load_wheel(wheel: Path) -> ForkWheel:
    """The wheel and its record, checked for the fields the image labels need."""
    wheel = Path(wheel)
    if not wheel.is_file() or not _WHEEL_RE.match(wheel.name):
        raise ForkError(f"{wheel} is not a wheel file. Run `invoke build` to make one in dist/.")
    rec_path = provenance_path(wheel)
    try:
        record = json.loads(rec_path.read_text())
    except FileNotFoundError:
        raise ForkError(
            f"{wheel.name} has no provenance record ({rec_path.name}) beside it; the image "
            "labels come from it. Run `invoke build` to make the wheel and its record."
        ) from None
    except json.JSONDecodeError as exc:
        raise ForkError(f"{rec_path} is not valid JSON ({exc}). Run `invoke build` again.") from None
    for field in ("pin.version", "pin.tag", "pin.commit", "series.label", "series.patches", "ops.key"):
        _required(record, field, rec_path)
    return ForkWheel(wheel, record)


def find_wheel(dist: Path, pin: Pin) -> ForkWheel:
    """The newest wheel in `dist` built on the pinned release and carrying a record."""
    prefix = f"vllm-{pin.version}+"
    candidates = [
        p for p in Path(dist).glob("vllm-*.whl") if p.name.startswith(prefix) and provenance_path(p).is_file()
    ]
    if not candidates:
        raise ForkError(
            f"no patched wheel for vLLM {pin.version} with a provenance record in {dist}. "
            "Run `invoke build` first, or pass `--wheel PATH`, or build the wheel inside "
            "Docker with `invoke docker --wheel-from build`."
        )
    newest = max(candidates, key=lambda p: (p.stat().st_mtime_ns, p.name))
    return load_wheel(newest)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stale_reasons(wheel: ForkWheel, pin: Pin, patches: Path) -> list[str]:
    """Why the wheel is not the build of the current pin and patch series (empty: it is)."""
    reasons: list[str] = []
    rec_pin = wheel.record["pin"]
    for field in ("version", "tag"):
        if str(rec_pin.get(field)) != str(getattr(pin, field)):
            reasons.append(
                f"pin {field} is {rec_pin.get(field)!r} in the record, {getattr(pin, field)!r} in upstream.toml"
            )
    built = {p["name"]: p.get("sha256") for p in wheel.record["series"]["patches"]}
    series_file = patches / "series"
    current_names = (
        [ln.strip() for ln in series_file.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        if series_file.is_file()
        else []
    )
    if list(built) != current_names:
        reasons.append(f"the series is {current_names} now, {list(built)} when the wheel was built")
    else:
        for name in current_names:
            path = patches / name
            if path.is_file() and built[name] and sha256_bytes(path.read_bytes()) != built[name]:
                reasons.append(f"{name} changed since the wheel was built")
    return reasons


def strip_userinfo(value):
    """A copy of a JSON value with credentials removed from any URL in it."""
    if isinstance(value, dict):
        return {k: strip_userinfo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_userinfo(v) for v in value]
    if isinstance(value, str) and "@" in value and "://" in value:
        parts = urllib.parse.urlsplit(value)
        if parts.username or parts.password:
            host = parts.hostname or ""
            netloc = host + (f":{parts.port}" if parts.port else "")
            return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return value


def stage_dist(wheel: ForkWheel, dest: Path) -> Path:
    """Make `dest` hold exactly the wheel and its record (credentials stripped from URLs).

    Built beside `dest` and renamed into place, so a failure leaves the old staging intact.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would follow the files into the build
        link_or_copy(wheel.path, tmp / wheel.path.name)
        clean = strip_userinfo(wheel.record)
        (tmp / provenance_path(wheel.path).name).write_text(json.dumps(clean, indent=2, sort_keys=True) + "\n")
        old = dest.with_name(f".{dest.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest

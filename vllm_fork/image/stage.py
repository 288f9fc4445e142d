"""Helpers the Dockerfile's wheel stages run (`python -m vllm_fork.image.stage ...`).

They keep the stages' shell steps short: seed the build's cache from the build
context, collect the wheel `invoke build` made, and export a compile stage's new
ops artifact.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.errors import ForkError
from vllm_fork.core.fs import copy_atomic, sha256_file
from vllm_fork.image.wheel import load_wheel, strip_userinfo


def seed_cache(seed: Path, cache: Path) -> list[Path]:
    """Copy files from `seed` into `cache` where the cache lacks them (each one atomically).

    Files already in the cache are kept: every use verifies sha256, so a seed never needs
    to overwrite, and a concurrent build never sees a half-written file.
    """
    added: list[Path] = []
    for src in sorted(p for p in Path(seed).rglob("*") if p.is_file()):
        rel = src.relative_to(seed)
        dest = Path(cache) / rel
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        copy_atomic(src, dest)
        added.append(rel)
    return added


def collect_dist(dist: Path, out: Path) -> Path:
    """Copy the one wheel `invoke build` made in `dist` and its record to `out`."""
    wheels = sorted(Path(dist).glob("vllm-*.whl"))
    if len(wheels) != 1:
        raise ForkError(f"expected one wheel in {dist} after `invoke build`, found {len(wheels)}")
    wheel = load_wheel(wheels[0])
    Path(out).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheel.path, Path(out) / wheel.path.name)
    clean = strip_userinfo(wheel.record)
    (Path(out) / wheel.record_path.name).write_text(json.dumps(clean, indent=2, sort_keys=True) + "\n")
    return Path(out) / wheel.path.name


def export_ops(record: Path, cache: Path, out: Path) -> Path | None:
    """Copy the ops artifact the record names out of `cache` (a compile stage's new artifact)."""
    rec = json.loads(Path(record).read_text())
    artifact = (rec.get("ops") or {}).get("artifact") or {}
    name, sha = artifact.get("file"), artifact.get("sha256")  # opscache.Entry.to_json's keys
    if not name:
        return None
    for path in Path(cache).rglob(name):
        if path.is_file() and (not sha or sha256_file(path) == sha):
            Path(out).mkdir(parents=True, exist_ok=True)
            dest = Path(out) / path.relative_to(cache)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            return dest
    raise ForkError(f"the ops artifact {name} named in {record} is not in {cache}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_fork.image.stage")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("seed-cache", help="copy seed files into the cache where it lacks them")
    p.add_argument("seed", type=Path)
    p.add_argument("cache", type=Path)
    p = sub.add_parser("collect", help="copy the built wheel and its record to a directory")
    p.add_argument("dist", type=Path)
    p.add_argument("out", type=Path)
    p = sub.add_parser("export-ops", help="copy the record's ops artifact out of the cache")
    p.add_argument("record", type=Path)
    p.add_argument("cache", type=Path)
    p.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "seed-cache":
            added = seed_cache(args.seed, args.cache) if args.seed.is_dir() else []
            print(f"seeded {len(added)} file(s) into {args.cache}")
        elif args.cmd == "collect":
            print(f"collected {collect_dist(args.dist, args.out)}")
        else:
            print(f"exported {export_ops(args.record, args.cache, args.out)}")
    except ForkError as exc:
        log.error(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

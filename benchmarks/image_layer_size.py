"""Size of the image's new layer for the real series: the delta vs. the whole vllm package.

    python benchmarks/image_layer_size.py [--tree build/vllm] [--out benchmarks/results/image_layer_size.json]

No Docker engine is needed: a venv stands in for upstream's image. Measured in one run:
1. the pinned release's official wheel (from the cache) installed into a fresh venv without
   dependencies, its sources compiled, as upstream's image has it (uv, UV_COMPILE_BYTECODE=1);
2. a stand-in for the fork's wheel: the official wheel with the members the patch queue
   changes (`git diff refs/fork/upstream HEAD -- vllm/` in the patched tree, `invoke apply`)
   replaced, `vllm/_version.py` and the dist-info at the fork's version. The fork's own build
   does the same (compiled members taken from the official wheel), so the difference between
   the two is the same files;
3. the Dockerfile's delta stage for real: scripts/image_delta.py snapshot, `pip install
   --no-deps --no-compile`, diff; then `apply` onto a copy of upstream's tree (with bytecode).
The layer sizes are those of a tar of the changed files (the delta's tree plus the bytecode
`apply` compiles) and of the whole installed package, gzip-compressed as registries store them.
"""

from __future__ import annotations

import argparse
import base64
import csv
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
import zipfile
from pathlib import Path

from vllm_fork.core.fs import write_atomic
from vllm_fork.core.git import git
from vllm_fork.upstream.download import fetch
from vllm_fork.upstream.pin import load_pin

REPO = Path(__file__).resolve().parent.parent

SCRIPT = REPO / "scripts" / "image_delta.py"


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def fork_wheel(official: Path, tree: Path, version: str, label: str, dest: Path) -> tuple[Path, dict]:
    """The official wheel with the patch queue's vllm/ changes and the fork's version."""
    changes = git(tree, "diff", "--name-status", "--no-renames", "refs/fork/upstream", "HEAD", "--", "vllm/")
    status = dict(reversed(line.split("\t", 1)) for line in changes.stdout.splitlines() if line)
    new_version = f"{version}+{label}"
    old_info, new_info = f"vllm-{version}.dist-info", f"vllm-{new_version}.dist-info"
    out = dest / official.name.replace(f"vllm-{version}-", f"vllm-{new_version}-")
    records = []
    with zipfile.ZipFile(official) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        names = set(src.namelist())
        for info in src.infolist():
            name = info.filename
            if status.get(name) == "D" or name == f"{old_info}/RECORD":
                continue
            data = src.read(info)
            if status.get(name) == "M":
                data = (tree / name).read_bytes()
            elif name == "vllm/_version.py":
                data = data.replace(f"'{version}'".encode(), f"'{new_version}'".encode())
            elif name == f"{old_info}/METADATA":
                data = data.replace(f"\nVersion: {version}\n".encode(), f"\nVersion: {new_version}\n".encode())
            name = name.replace(old_info + "/", new_info + "/")
            info.filename = name
            dst.writestr(info, data)
            records.append((name, record_hash(data), len(data)))
        for name, st in status.items():
            if st == "A" and name not in names:
                data = (tree / name).read_bytes()
                dst.writestr(name, data)
                records.append((name, record_hash(data), len(data)))
        record = io.StringIO()
        csv.writer(record, lineterminator="\n").writerows(records + [(f"{new_info}/RECORD", "", "")])
        dst.writestr(f"{new_info}/RECORD", record.getvalue())
    return out, status


def gz_tar_size(paths: list[Path]) -> tuple[int, int]:
    """(uncompressed bytes of the files, gzip size of a tar of them)."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for path in paths:
            tar.add(path, recursive=False)
    return sum(p.stat().st_size for p in paths), len(buf.getvalue())


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stdout}{proc.stderr}")
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=REPO / "build" / "vllm")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (printed)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "image_layer_size.json")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="no bytecode compile of the whole install (minutes on 2 cores): no size claims",
    )
    args = parser.parse_args()
    pin = load_pin(REPO)
    official = fetch("vllm", pin.wheel.filename, pin.wheel.sha256)
    head = git(args.tree, "rev-parse", "--short", "HEAD").stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="image-layer-"))
    try:
        t0 = time.monotonic()
        env_dir = work / "env"
        venv.create(env_dir, with_pip=True)
        py = env_dir / "bin" / "python3"
        env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", official], env=env)
        site = next((env_dir / "lib").glob("python3.*/site-packages"))
        if not args.smoke:
            run([py, "-m", "compileall", "-q", "-j", "2", site / "vllm"], env=env)
        package = [
            p
            for p in [*(site / "vllm").rglob("*"), *(site / f"vllm-{pin.version}.dist-info").rglob("*")]
            if p.is_file()
        ]
        whole = gz_tar_size(package)
        t_base = time.monotonic() - t0

        wheel, status = fork_wheel(official, args.tree, pin.version, f"fork.{head}", work)
        t0 = time.monotonic()
        run([py, SCRIPT, "snapshot", work / "before.json"], env=env)
        run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--no-cache-dir", wheel], env=env)
        diff = run([py, SCRIPT, "diff", work / "before.json", work / "delta-out"], env=env).stdout.strip()
        t_delta = time.monotonic() - t0
        manifest = json.loads((work / "delta-out" / "delta.json").read_text())
        delta_files = [p for p in (work / "delta-out" / "tree").rglob("*") if p.is_file()]
        delta = gz_tar_size(delta_files)
        compiled = []
        for source in manifest["compile"]:  # what `apply` adds: bytecode of the changed sources
            out = run(
                [py, "-c", "import py_compile, sys; print(py_compile.compile(sys.argv[1], doraise=True))", source]
            )
            compiled.append(Path(out.stdout.strip()))
        layer = gz_tar_size(delta_files + compiled)
        result = {
            "python": platform.python_version(),
            "official_wheel": pin.wheel.filename,
            "series_head": head,
            "queue_changes_under_vllm": status,
            "whole_package": {"files": len(package), "bytes": whole[0], "gzip_tar_bytes": whole[1]},
            "delta": {
                "changed": [p.split("site-packages/", 1)[-1] for p in manifest["changed"]],
                "added": [p.split("site-packages/", 1)[-1] for p in manifest["added"]],
                "removed": [p.split("site-packages/", 1)[-1] for p in manifest["removed"]],
                "kept_bytecode": manifest["kept_bytecode"],
                "files": len(delta_files),
                "bytes": delta[0],
                "gzip_tar_bytes": delta[1],
            },
            "layer_with_bytecode": {
                "files": len(delta_files) + len(compiled),
                "bytes": layer[0],
                "gzip_tar_bytes": layer[1],
            },
            "ratio_whole_over_layer_gzip": round(whole[1] / layer[1], 1),
            "seconds": {"base_install_and_compile": round(t_base, 1), "snapshot_install_diff": round(t_delta, 1)},
            "diff_summary": diff,
        }
        write_atomic(args.out, json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

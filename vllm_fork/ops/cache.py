"""The ops cache: `ops-cache/index.json` (committed) maps ops key -> artifact.

Artifacts (zips of compiled members) live outside the clone in `cache_dir()/ops`,
and can be fetched from the remotes the index lists (`file://` directories and
HTTP(S) URLs holding the artifact files by name, and OCI registries holding them as
blobs, see oci.py; VLLM_FORK_OPS_REMOTES adds more).
Every use verifies sha256: a corrupt or tampered artifact is deleted and fetched
again, never used. Artifacts and the index are written through a temp file and a
rename, and index updates hold a lock, so builds sharing a cache cannot corrupt it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core.errors import ConfigError, DownloadError, ForkError, IntegrityError
from vllm_fork.core.fs import (
    atomic_open,
    b64_digest,
    plain_name,
    remove_stale_temps,
    rename_into_place,
    sha256_file,
    write_atomic,
)
from vllm_fork.core.log import LogFn
from vllm_fork.core.log import info as log_info
from vllm_fork.core.log import warning as log_warning
from vllm_fork.core.paths import REPO_ROOT, cache_dir, cache_subdir
from vllm_fork.core.urls import redact_url
from vllm_fork.ops import oci
from vllm_fork.upstream.download import fetch_url

INDEX_FILE = Path("ops-cache") / "index.json"
REMOTES_ENV = "VLLM_FORK_OPS_REMOTES"
SCHEMA = 1


def ops_dir() -> Path:
    return cache_subdir("ops")


def artifact_filename(key: str) -> str:
    return f"vllm-ops-{key}.zip"


@dataclass(frozen=True)
class Entry:
    key: str
    file: str
    sha256: str
    size: int
    members: int
    record_sha256: str  # of the member RECORD lines (see member_record), derived from the zip
    provenance: dict

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "sha256": self.sha256,
            "size": self.size,
            "members": self.members,
            "record_sha256": self.record_sha256,
            "provenance": self.provenance,
        }


def _empty_index() -> dict:
    return {"schema": SCHEMA, "remotes": [], "artifacts": {}}


def read_index(root: Path = REPO_ROOT) -> dict:
    path = root / INDEX_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return _empty_index()
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}); restore it with `git checkout {INDEX_FILE}`") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise ConfigError(f"{path} has schema {schema!r}; this tool reads schema {SCHEMA}")
    data.setdefault("remotes", [])
    data.setdefault("artifacts", {})
    if not isinstance(data["remotes"], list) or not all(isinstance(r, str) for r in data["remotes"]):
        raise ConfigError(
            f'{path}: "remotes" must be a list of URL strings; restore it with `git checkout {INDEX_FILE}`'
        )
    if not isinstance(data["artifacts"], dict):
        raise ConfigError(
            f'{path}: "artifacts" must map ops keys to entries; restore it with `git checkout {INDEX_FILE}`'
        )
    return data


ENTRY_FIELDS = {"file": str, "sha256": str, "size": int, "members": int, "record_sha256": str, "provenance": dict}


def lookup(key: str, root: Path = REPO_ROOT) -> Entry | None:
    raw = read_index(root)["artifacts"].get(key)
    if raw is None:
        return None
    path = root / INDEX_FILE
    where = f"{path}: the entry for key {key[:16]}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} is not an object; restore it with `git checkout {INDEX_FILE}`")
    for name, kind in ENTRY_FIELDS.items():
        if not isinstance(raw.get(name), kind):
            raise ConfigError(
                f'{where} lacks "{name}" (a {kind.__name__}) or has the wrong type; '
                f"restore it with `git checkout {INDEX_FILE}`"
            )
    try:
        # The name is joined to the cache's ops/ directory and to remote URLs: it must stay inside.
        plain_name(raw["file"], "artifact file")
    except ValueError as exc:
        raise ConfigError(
            f"{where}: {exc}; the tool reads and writes only inside {ops_dir()}. "
            f"Restore the index with `git checkout {INDEX_FILE}`"
        ) from None
    return Entry(key=key, **{k: raw[k] for k in ENTRY_FIELDS})


@contextmanager
def _index_lock(root: Path) -> Iterator[Path]:
    path = root / INDEX_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    # The lock lives in the cache, not the clone (nothing to ignore or commit); it is
    # per index file, resolved, so clones sharing one index through a link share it.
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    with open(locks / f"index-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path


def _write_index(path: Path, data: dict) -> None:
    data["artifacts"] = dict(sorted(data["artifacts"].items()))
    write_atomic(path, (json.dumps(data, indent=2, sort_keys=False) + "\n").encode())


def add_remote(url: str, root: Path = REPO_ROOT) -> None:
    with _index_lock(root) as path:
        data = read_index(root)
        if url not in data["remotes"]:
            data["remotes"].append(url)
            _write_index(path, data)


def remotes(root: Path = REPO_ROOT) -> list[str]:
    extra = os.environ.get(REMOTES_ENV, "").split()
    return list(dict.fromkeys(extra + read_index(root)["remotes"]))


# -- member RECORD: sha256 and size of every member, as a wheel's RECORD needs them --


def member_record(artifact: Path) -> dict[str, tuple[str, int]]:
    """name -> (urlsafe-b64 sha256, size) of every member (reads and inflates them all)."""
    record = {}
    with zipfile.ZipFile(artifact) as zf:
        for info in zf.infolist():
            digest = hashlib.sha256()
            with zf.open(info) as fh:  # zipfile checks each member's CRC as it reads
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
            record[info.filename] = (b64_digest(digest.digest()), info.file_size)
    return record


def record_bytes(record: dict[str, tuple[str, int]]) -> bytes:
    """The canonical bytes of a member RECORD, whose sha256 the index entry keeps."""
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def _record_path(entry_sha256: str) -> Path:
    return ops_dir() / f"{entry_sha256}.record.json"


def load_member_record(entry: Entry, artifact: Path) -> dict[str, tuple[str, int]]:
    """The member RECORD, from its verified sidecar or computed again from the artifact."""
    path = _record_path(entry.sha256)
    if path.is_file():
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() == entry.record_sha256:
            return {k: tuple(v) for k, v in json.loads(data).items()}
        path.unlink(missing_ok=True)
    record = member_record(artifact)
    data = record_bytes(record)
    if hashlib.sha256(data).hexdigest() != entry.record_sha256:
        raise IntegrityError(
            f"the members of {artifact.name} do not match the index entry for key {entry.key[:16]}; "
            "the artifact is not what was stored. Delete it and run the build again."
        )
    write_atomic(path, data)
    return record


# -- getting and storing artifacts --


def _copy_verified(src: Path, dest: Path, sha256: str) -> None:
    digest = hashlib.sha256()
    with atomic_open(dest, ".part") as out, open(src, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
        if digest.hexdigest() != sha256:
            raise IntegrityError(f"{src} has sha256 {digest.hexdigest()}, the index says {sha256}: not used")


def _mismatch_advice(remote: str, entry: Entry) -> str:
    """The next step when `remote` serves other bytes than the index records for `entry`."""
    remote = redact_url(remote)
    return (
        f"{remote} serves another file under this artifact's name (key {entry.key[:16]}). Publish the good one "
        f"there again from a machine that has it (`invoke ops.publish {remote}`), or take the remote out of "
        f"ops-cache/index.json (or {REMOTES_ENV}) and run `invoke ops.seed` for the pinned release."
    )


def _fetch_from(remote: str, entry: Entry, dest: Path) -> None:
    advice = _mismatch_advice(remote, entry)
    if oci.is_oci(remote):
        oci.fetch(remote, entry.file, entry.sha256, dest, advice)
        return
    url = remote.rstrip("/") + "/" + urllib.parse.quote(entry.file)
    if url.startswith("file:"):
        _copy_verified(Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)), dest, entry.sha256)
    elif url.startswith(("http://", "https://")):
        fetch_url(url, dest, entry.sha256, mismatch_advice=advice)
    else:
        raise ConfigError(f"unsupported ops remote {redact_url(remote)!r} (use file://, http(s):// or oci://)")


def get(key: str, root: Path = REPO_ROOT, log: LogFn = log_info) -> tuple[Entry, Path] | None:
    """The verified artifact for `key`, fetched from a remote if needed; None if the index lacks it."""
    entry = lookup(key, root)
    if entry is None:
        return None
    for pattern in (".*.part", ".seed.*.zip"):  # left by a killed fetch or seed
        remove_stale_temps(ops_dir(), pattern)
    dest = ops_dir() / entry.file
    if dest.is_file():
        got = sha256_file(dest)
        if got == entry.sha256:
            return entry, dest
        log_warning(
            f"cached artifact {dest} has sha256 {got}, the index says {entry.sha256}; deleting it and fetching it again"
        )
        dest.unlink(missing_ok=True)
    errors = []
    for remote in remotes(root):
        try:
            log(f"fetching {entry.file} from {redact_url(remote)}")
            _fetch_from(remote, entry, dest)
            return entry, dest
        except (ForkError, OSError) as exc:
            said = redact_url(f"{remote}: {exc}")
            errors.append(said.replace("\n", "\n    "))  # its own lines under its remote
    detail = "".join(f"\n  {e}" for e in errors) or "\n  (no remotes configured)"
    raise DownloadError(
        f"the ops artifact for key {key[:16]} ({entry.file}) is in the index but not in "
        f"{ops_dir()} and no remote served a good copy:{detail}\n"
        "Run `invoke ops.seed` (for the pinned release), add a remote to ops-cache/index.json "
        f"or {REMOTES_ENV}, or copy the file into {ops_dir()}."
    )


def put(
    key: str,
    artifact_tmp: Path,
    provenance: dict,
    root: Path = REPO_ROOT,
    record: dict[str, tuple[str, int]] | None = None,
) -> tuple[Entry, Path]:
    """Store a finished artifact (a temp file, moved) under `key` and record it in the index.

    `record` (member -> b64 sha256, size) may come from a verified source, e.g. the
    RECORD of the sha256-checked official wheel the members were copied from raw;
    otherwise every member is inflated and hashed here.
    """
    sha256 = sha256_file(artifact_tmp)
    if record is None:
        record = member_record(artifact_tmp)
    record_data = record_bytes(record)
    entry = Entry(
        key=key,
        file=artifact_filename(key),
        sha256=sha256,
        size=artifact_tmp.stat().st_size,
        members=len(record),
        record_sha256=hashlib.sha256(record_data).hexdigest(),
        provenance=provenance,
    )
    dest = ops_dir() / entry.file
    staged = ops_dir() / f".{entry.file}.{os.getpid()}.part"
    os.replace(artifact_tmp, staged) if artifact_tmp.parent == ops_dir() else _copy_verified(
        artifact_tmp, staged, sha256
    )
    rename_into_place(staged, dest)  # with the umask's mode, as any file the tool writes
    artifact_tmp.unlink(missing_ok=True)
    write_atomic(_record_path(sha256), record_data)
    with _index_lock(root) as path:
        data = read_index(root)
        data["artifacts"][key] = entry.to_json()
        _write_index(path, data)
    return entry, dest


def publish_oci(key: str, remote: str, root: Path = REPO_ROOT) -> str:
    """Push the artifact for `key` to an OCI registry remote; returns `<registry>/<repo>:<key>`."""
    found = get(key, root)
    if found is None:
        raise ForkError(f"no artifact for key {key[:16]} in the index; run `invoke ops.seed` first")
    entry, path = found
    return oci.push(remote, key, path, entry.sha256)


def publish(key: str, remote_dir: Path, root: Path = REPO_ROOT) -> Path:
    """Copy the artifact for `key` into a directory other machines read as a file:// or HTTP remote."""
    found = get(key, root)
    if found is None:
        raise ForkError(f"no artifact for key {key[:16]} in the index; run `invoke ops.seed` first")
    entry, path = found
    remote_dir.mkdir(parents=True, exist_ok=True)
    dest = remote_dir / entry.file
    if not (dest.is_file() and sha256_file(dest) == entry.sha256):
        _copy_verified(path, dest, entry.sha256)
    return dest

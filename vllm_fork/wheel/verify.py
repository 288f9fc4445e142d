"""`invoke verify dist/<wheel>`: check a wheel against its provenance record and the ops artifact."""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.errors import ForkError, IntegrityError
from vllm_fork.core.fs import b64_sha256, sha256_file
from vllm_fork.core.git import rev
from vllm_fork.core.paths import REPO_ROOT, patches_dir
from vllm_fork.ops import cache as opscache
from vllm_fork.ops.seed import official_wheel
from vllm_fork.queue.series import read_series
from vllm_fork.upstream.identity import assigned, release_identity
from vllm_fork.upstream.pin import load_pin
from vllm_fork.upstream.sources import ensure_upstream, upstream_repo
from vllm_fork.wheel import provenance
from vllm_fork.wheel.expected import blob_id, patched_blobs
from vllm_fork.wheel.version import label_of, series_id
from vllm_fork.wheel.writer import read_record


@dataclass
class Report:
    checks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def ok(self, msg: str) -> None:
        self.checks.append(msg)

    def bad(self, msg: str) -> None:
        self.problems.append(msg)


def _metadata_body(text: str) -> str:
    """METADATA without its Version line (the fork's version differs by design)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("Version: "))


def verify(wheel: Path, root: Path = REPO_ROOT) -> Report:
    if not wheel.is_file():
        raise ForkError(f"{wheel} does not exist; build it with `invoke build`")
    path = provenance.provenance_path(wheel)
    try:
        record = provenance.read(wheel)
        version, key, built_with = record["version"], record["ops"]["key"], record["ops"]["artifact"]["sha256"]
        wheel_sha256 = record["wheel"]["sha256"]
    except FileNotFoundError:
        raise IntegrityError(
            f"{path} is missing: the wheel has no provenance record; rebuild with `invoke build`"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(
            f"{path} is not a whole provenance record ({type(exc).__name__}: {exc}); it was cut short or edited. "
            "Rebuild the wheel with `invoke build` (it writes both again)."
        ) from None
    try:
        return _verify(wheel, record, version, key, built_with, wheel_sha256, root)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise IntegrityError(
            f"{wheel} is corrupt ({exc}): a member cannot be read back. Do not install it; "
            "rebuild it with `invoke build`."
        ) from None


def _verify(
    wheel: Path, record: dict, version: str, key: str, built_with: str, wheel_sha256: str, root: Path
) -> Report:
    report = Report()

    got = sha256_file(wheel)
    if got != wheel_sha256:
        report.bad(f"wheel sha256 is {got}, its provenance says {wheel_sha256}")
    else:
        report.ok("wheel sha256 matches its provenance record")

    with zipfile.ZipFile(wheel) as zf:
        dist_info = _dist_info(zf, wheel)
        # Every member against the wheel's own RECORD (reads and hashes them all).
        hashes: dict[str, str] = {}
        for info in zf.infolist():
            hashes[info.filename] = b64_sha256(zf.read(info))
        rows = {row[0]: row for row in read_record(zf, dist_info)}
        bad_rows = [
            n
            for n, h in hashes.items()
            if n != f"{dist_info}/RECORD" and (n not in rows or rows[n][1] != f"sha256={h}")
        ]
        missing = [n for n in rows if n not in hashes]
        if bad_rows or missing:
            report.bad(
                f"RECORD disagrees with {len(bad_rows)} member(s) and lists {len(missing)} missing: "
                f"{(bad_rows + missing)[:5]}"
            )
        else:
            report.ok(f"all {len(hashes)} members match the wheel's RECORD")

        # Compiled members byte-identical to the verified artifact.
        found = opscache.get(key, root)
        if found is None:
            report.bad(f"the ops index has no artifact for key {key[:16]}: cannot check compiled members")
        else:
            entry, artifact = found
            if entry.sha256 != built_with:
                report.bad("the index's artifact for this key is not the one the wheel was built from")
            members = opscache.load_member_record(entry, artifact)
            differ = [n for n, (h, _size) in members.items() if hashes.get(n) != h]
            if differ:
                report.bad(f"{len(differ)} compiled member(s) differ from the artifact or are missing: {differ[:5]}")
            else:
                report.ok(f"all {len(members)} compiled members byte-identical to artifact {entry.file}")

        pin = load_pin(root)
        official_path = official_wheel(pin)
        with zipfile.ZipFile(official_path) as official:
            official_version = _metadata_version(
                official.read(f"{_dist_info(official, official_path)}/METADATA").decode()
            )
        _check_names(report, wheel, zf, dist_info, version, official_version, record, root)
        recomputed = _check_patched_from_series(report, zf, record, root)

        # Every file the record says the series changes is in the wheel as patched.
        patched_bad = []
        for item in record.get("patched_files", []):
            if item.get("deleted"):
                if item["path"] in hashes:
                    patched_bad.append(f"{item['path']} (deleted by the series) is in the wheel")
            else:
                data = zf.read(item["path"]) if item["path"] in hashes else None
                if data is None or hashlib.sha256(data).hexdigest() != item["sha256"]:
                    patched_bad.append(f"{item['path']} missing or not as patched")
        if patched_bad:
            report.bad("; ".join(patched_bad[:5]))
        else:
            report.ok(f"{len(record.get('patched_files', []))} patched package file(s) present as patched")

        # Metadata as upstream's, unless the series changes the requirements.
        with zipfile.ZipFile(official_path) as official:
            upstream_dist = _dist_info(official, official_path)
            ours = zf.read(f"{dist_info}/METADATA").decode()
            theirs = official.read(f"{upstream_dist}/METADATA").decode()
            if f"Version: {version}\n" not in ours:
                report.bad(f"METADATA does not say Version: {version}")
            if record.get("changes_requirements"):
                report.ok(
                    "METADATA not compared with upstream's: the series changes requirements/setup.py/pyproject.toml"
                )
            elif _metadata_body(ours) != _metadata_body(theirs):
                report.bad("METADATA differs from the official wheel's beyond the version")
            else:
                report.ok("METADATA equals the official wheel's except the version")
            # The paths the series changes, as recomputed from patches/ where it could be: a record
            # that lists more (a file an unexported commit changed) must not excuse them.
            patched = (
                set(recomputed) if recomputed is not None else {i["path"] for i in record.get("patched_files", [])}
            )
            _compare_unpatched(report, hashes, official, upstream_dist, dist_info, patched, members_of(found))
            for name in ("entry_points.txt", "top_level.txt"):
                if zf.read(f"{dist_info}/{name}") != official.read(f"{upstream_dist}/{name}") and not record.get(
                    "changes_requirements"
                ):
                    report.bad(f"{name} differs from the official wheel's")
    return report


def _dist_info(zf: zipfile.ZipFile, wheel: Path) -> str:
    """The wheel's one `.dist-info` directory, found by what the archive holds (not by its name)."""
    found = sorted({n.split("/")[0] for n in zf.namelist() if n.split("/")[0].endswith(".dist-info")})
    if len(found) != 1:
        raise IntegrityError(f"{wheel} holds {len(found)} .dist-info directories ({found}); rebuild it")
    return found[0]


def _metadata_version(metadata: str) -> str | None:
    for line in metadata.splitlines():
        if line.startswith("Version: "):
            return line.removeprefix("Version: ").strip()
    return None


def _check_names(
    report: Report,
    wheel: Path,
    zf: zipfile.ZipFile,
    dist_info: str,
    version: str,
    official_version: str | None,
    record: dict,
    root: Path,
) -> None:
    """The version every name in the wheel says, its release against the code, its label against its series."""
    version_py = zf.read("vllm/_version.py").decode() if "vllm/_version.py" in zf.namelist() else ""
    said = {
        "the file name": wheel.name.split("-")[1] if wheel.name.count("-") >= 4 else wheel.name,
        "the .dist-info directory": dist_info.removeprefix("vllm-").removesuffix(".dist-info"),
        "METADATA": _metadata_version(zf.read(f"{dist_info}/METADATA").decode()),
        "vllm/_version.py": assigned(version_py, "version"),
    }
    disagree = [f"{where} says {value}" for where, value in said.items() if value != version]
    if disagree:
        report.bad(f"the wheel's version is not its provenance's {version}: " + "; ".join(disagree))
    else:
        report.ok(f"file name, .dist-info, METADATA and vllm/_version.py all say {version}")
    release, _, label = version.partition("+")
    upstream = record.get("upstream_commit", "")
    sdist_version = None
    if upstream and rev(upstream_repo(), upstream):
        found = release_identity(upstream_repo(), upstream)
        sdist_version = found.pkg_info_version or found.version_py_version
    wrong = [
        f"{what} is {value}"
        for what, value in (
            ("the official wheel's METADATA", official_version),
            ("the sdist's PKG-INFO", sdist_version),
        )
        if value is not None and value != release
    ]
    if wrong:
        report.bad(f"the wheel is named release {release}, but " + " and ".join(wrong) + ": the name lies")
    else:
        report.ok(f"release {release} is the one the official wheel and the upstream tree say")
    series = record.get("series", {})
    dirty = bool(series.get("unexported") or series.get("missing"))
    want = label_of(series.get("patches", []), dirty)
    if label != want:
        report.bad(
            f"local version {label or '(none)'} is not the label of the series its provenance lists ({want})"
            + ("; the wheel holds commits patches/ lacks, so it must end in .dirty" if dirty else "")
        )
    else:
        report.ok(
            f"local version {label} is the hash of its series" + (" (unexported commits: .dirty)" if dirty else "")
        )


def _check_patched_from_series(report: Report, zf: zipfile.ZipFile, record: dict, root: Path) -> set[str] | None:
    """Recompute the patched files from patches/ and compare the wheel's members; the paths, or None if not here."""
    series = record.get("series", {})
    if series.get("unexported") or series.get("missing"):
        report.ok(
            "patched files checked against the provenance only: the wheel was built from commits patches/ "
            "lacks: " + "; ".join(series.get("unexported", []) + series.get("missing", []))
        )
        return None
    here = series_id(root)
    label = record.get("version", "").partition("+")[2]
    if series.get("patches") != here.patches:
        fork = record.get("fork", {}).get("commit")
        report.bad(
            f"the wheel's series {label} is not this checkout's patches/ ({here.label}), so its patched files "
            "cannot be recomputed here; verify it in the fork checkout it was built from"
            + (f" (commit {fork})" if fork else "")
        )
        return None
    base = record.get("upstream_commit", "")
    repo = upstream_repo()
    if not base or rev(repo, base) is None:
        ensure_upstream(load_pin(root))
    if not base or rev(repo, base) is None:
        report.bad(f"upstream commit {base or '(none)'} of the provenance is not the pinned release's tree")
        return None
    expected = patched_blobs(repo, base, read_series(patches_dir(root)))
    names = set(zf.namelist())
    blobs = {path: blob_id(zf.read(path)) for path in expected if path in names}
    wrong = []
    for path, blob in sorted(expected.items()):
        if blob is None:
            if path in names:
                wrong.append(f"{path} (deleted by the series) is in the wheel")
        elif path not in blobs:
            wrong.append(f"{path} is missing")
        elif blobs[path] != blob:
            wrong.append(f"{path} is not as patches/ make it")
    listed = {item["path"] for item in record.get("patched_files", [])}
    if listed != set(expected):
        extra, lacking = sorted(listed - set(expected)), sorted(set(expected) - listed)
        wrong.append(
            "the provenance's patched files are not the series' "
            f"(listed but not changed by patches/: {extra[:5]}; changed but not listed: {lacking[:5]})"
        )
    if wrong:
        report.bad(f"recomputed from patches/ ({label}): " + "; ".join(wrong[:8]))
    else:
        report.ok(f"{len(expected)} patched file(s) recomputed from patches/ equal the wheel's")
    return set(expected)


def members_of(found: tuple[opscache.Entry, Path] | None) -> set[str]:
    """The compiled members' names (checked against the artifact, not upstream's wheel)."""
    if found is None:
        return set()
    entry, artifact = found
    return set(opscache.load_member_record(entry, artifact))


#: Members the fork's build writes differently from upstream's by design: the version.
VERSIONED = ("vllm/_version.py",)


def _compare_unpatched(
    report: Report,
    hashes: dict[str, str],
    official: zipfile.ZipFile,
    upstream_dist: str,
    dist_info: str,
    patched: set[str],
    compiled: set[str],
) -> None:
    """Every member the series leaves alone must be upstream's byte for byte (the official wheel's RECORD).

    The official wheel is sha256-checked against the pin, so its RECORD is trusted;
    the fork wheel's own RECORD is not (whoever swapped a file could rewrite it).
    """
    theirs = {
        row[0]: row[1].removeprefix("sha256=")
        for row in read_record(official, upstream_dist)
        if len(row) > 1 and row[1] and not row[0].startswith(f"{upstream_dist}/")
    }
    differ, missing = [], []
    for name, digest in theirs.items():
        if name in patched or name in compiled or name in VERSIONED:
            continue
        if name not in hashes:
            missing.append(name)
        elif hashes[name] != digest:
            differ.append(name)
    extra = [
        n
        for n in hashes
        if n not in theirs
        and n not in patched
        and n not in compiled
        and n not in VERSIONED
        and not n.startswith(f"{dist_info}/")
    ]
    if differ or missing or extra:
        parts = []
        if differ:
            parts.append(f"{len(differ)} unpatched member(s) differ from upstream's: {differ[:5]}")
        if missing:
            parts.append(f"{len(missing)} of upstream's member(s) missing: {missing[:5]}")
        if extra:
            parts.append(f"{len(extra)} member(s) neither upstream's nor made by the series: {extra[:5]}")
        report.bad("; ".join(parts) + " (compared with the official wheel's RECORD; do not install this wheel)")
    else:
        report.ok(
            f"all {len(theirs) - len(patched & set(theirs))} unpatched members byte-identical to upstream's wheel"
        )

"""The errors the tasks catch and print: typed by what failed, each with its exit status.

Every one carries a message a user can act on (the file, the patch, both hashes,
the next command); the tasks print it without a traceback and exit with
`exit_code`. Callers that must tell failures apart catch the type, never match text.
"""

import errno


class ForkError(Exception):
    """A failure with a message that says what went wrong and what to do next."""

    exit_code = 1


class ConfigError(ForkError):
    """A file of the fork is missing or malformed: upstream.toml, patches/series, ops-cache/*."""


class GitError(ForkError):
    """A git command failed; the message holds the command and git's output."""


class StepCutShort(ForkError):
    """A step failed after it began remaking build/vllm (a git it ran was killed, or
    ignored a Ctrl-C it could not pass on): the tree holds only the step's own half-done
    work, so its journal stays and the next run of the step redoes it."""


class DownloadError(ForkError):
    """A file could not be fetched from the package index or a remote."""


class IntegrityError(ForkError):
    """A file's sha256 is not the one it must have; the bad copy was not used."""


class BuildError(ForkError):
    """vLLM's setup.py (or the build env's pip) failed; the message holds its output's tail."""


class UsageError(ForkError):
    """The command line itself is wrong: an option where a value was due, options that exclude each other."""

    exit_code = 2  # as getopt and argparse tools do: scripts can tell a typo from a failure


class DiskFull(ForkError):
    """A write failed for lack of space (ENOSPC, EDQUOT); the half-written file was removed."""

    exit_code = 28  # errno ENOSPC: scripts can tell "free space and retry" from other failures


class Interrupted(ForkError):
    """The tool was stopped (Ctrl-C, SIGTERM); the next run recovers what the step left."""

    exit_code = 130  # 128 + SIGINT, as a shell reports it


def disk_full(exc: OSError, what: str) -> DiskFull:
    """A DiskFull naming what was being written and where, from the OSError that said so."""
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    return DiskFull(
        f"no space left writing {what}{where}: {exc.strerror or exc}.\n"
        "Nothing half-written was kept. Free some space (`df -h` shows where) and run the same command again."
    )


class FileAccessError(ForkError):
    """A file or directory the tool must read or write cannot be (read-only file system, permissions)."""

    exit_code = 74  # EX_IOERR (sysexits.h): an input/output error, not a failure of the queue


#: What to do about an OSError, by errno; the cache's own remedy when the path is in it.
_REMEDIES = {
    errno.EROFS: "the file system there is mounted read-only",
    errno.EACCES: "permission denied: the user running the tool may not write there",
    errno.EPERM: "the operation is not permitted there",
    errno.ENOENT: "a directory on the way does not exist",
    errno.ENOTDIR: "a component of the path is a file, not a directory",
    errno.EISDIR: "a directory is where a file must go",
    errno.EIO: "the disk reported an input/output error",
}


def file_access(exc: OSError, cache: str | None = None) -> ForkError:
    """A user-facing error for an OSError the tool met: the path, what is wrong, and what to do.

    `cache` is the cache directory: a path inside it gets the cache's own remedy (it can
    live anywhere, through VLLM_FORK_CACHE).
    """
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(exc, "a file")
    where = exc.filename or "a file"
    if getattr(exc, "filename2", None):
        where = f"{where} -> {exc.filename2}"
    why = _REMEDIES.get(exc.errno or 0, exc.strerror or str(exc))
    if cache and str(where).startswith(cache):
        todo = (
            f"The tool's cache is {cache}: make it writable, or point VLLM_FORK_CACHE at a writable directory "
            "(it is made if missing), then run the same command again."
        )
    else:
        todo = "Make the path writable by this user (or free the disk), then run the same command again."
    return FileAccessError(f"cannot use {where}: {why} ({exc.strerror or exc}).\nNothing half-written was kept. {todo}")

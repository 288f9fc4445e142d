"""Which Docker builder runs here: `docker buildx build`, or `docker build` with BuildKit.

The Dockerfile's default route (the wheel from dist/) needs BuildKit (bind and cache
mounts) but no buildx and no named build contexts, so a plain Docker engine builds it:
Debian's `docker.io`, a CI runner's engine. buildx is used where it exists because it
also takes named build contexts (`--build-context NAME=DIR`), which the routes that build
the wheel inside Docker need (`ops-seed`), and `--output` to write the wheel to the host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

from vllm_fork.core.errors import ForkError

#: `docker` is looked up on PATH; this overrides it (e.g. /usr/bin/docker, Debian's client).
CLIENT_ENV = "VLLM_FORK_DOCKER"

BUILDX = "buildx"
BUILDKIT = "buildkit"


@dataclass(frozen=True)
class Engine:
    """A Docker client and the builder it drives.

    `kind` is BUILDX (`docker buildx build`) or BUILDKIT (`docker build` with
    DOCKER_BUILDKIT=1, the engine's built-in BuildKit). `host` is the DOCKER_HOST to talk
    to (None: the client's default).
    """

    client: str
    kind: str
    host: str | None = None
    env: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def named_contexts(self) -> bool:
        """Whether `--build-context NAME=DIR` works (buildx only; the engine's own BuildKit lacks it)."""
        return self.kind == BUILDX

    def describe(self) -> str:
        if self.kind == BUILDX:
            return f"`{self.client} buildx build` (buildx)"
        return f"`{self.client} build` with BuildKit (DOCKER_BUILDKIT=1; no buildx here)"

    def environ(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        env["DOCKER_BUILDKIT"] = "1"
        if self.host:
            env["DOCKER_HOST"] = self.host
        return env

    def build_prefix(self) -> list[str]:
        return [self.client, "buildx", "build"] if self.kind == BUILDX else [self.client, "build"]

    def run(
        self,
        *args: str,
        check: bool = True,
        capture: bool = True,
        input: bytes | None = None,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess:
        """`docker ARGS` against this engine; on failure a ForkError with the client's stderr."""
        try:
            proc = subprocess.run(
                [self.client, *args],
                env=self.environ(),
                capture_output=capture,
                input=input,
                timeout=timeout,
                check=False,
            )
        except OSError as exc:
            raise ForkError(f"cannot run the docker client {self.client}: {exc.strerror}") from None
        if check and proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip() if capture else "(output above)"
            raise ForkError(f"`docker {' '.join(args[:3])} ...` failed ({proc.returncode}): {err}")
        return proc

    @contextmanager
    def output_stream(self, *args: str) -> Iterator[IO[bytes]]:
        """`docker ARGS`'s stdout as a stream, for output too big to hold or store (`docker save`).

        On failure a ForkError with the client's stderr, also when the reader gave up first
        because the stream broke off.
        """
        with tempfile.TemporaryFile() as errors:
            try:
                proc = subprocess.Popen([self.client, *args], env=self.environ(), stdout=subprocess.PIPE, stderr=errors)
            except OSError as exc:
                raise ForkError(f"cannot run the docker client {self.client}: {exc.strerror}") from None
            assert proc.stdout is not None  # stdout=PIPE
            try:
                yield proc.stdout
            except BaseException:
                failed = proc.poll()  # before the kill: did the client fail by itself?
                proc.kill()
                proc.wait()
                if failed:
                    raise self._failed(args, failed, errors) from None
                raise
            finally:
                proc.stdout.close()
            returncode = proc.wait()
            if returncode != 0:
                raise self._failed(args, returncode, errors)

    @staticmethod
    def _failed(args: tuple[str, ...], returncode: int, errors: IO[bytes]) -> ForkError:
        errors.seek(0)
        err = errors.read().decode(errors="replace").strip()
        return ForkError(f"`docker {' '.join(args[:3])} ...` failed ({returncode}): {err}")


def client_path() -> str | None:
    return os.environ.get(CLIENT_ENV) or shutil.which("docker")


def has_buildx(client: str, env: dict[str, str]) -> bool:
    try:
        proc = subprocess.run([client, "buildx", "version"], capture_output=True, env=env, check=False)
    except OSError:  # no such client: no buildx either (find_engine says what is missing)
        return False
    return proc.returncode == 0


def builder_kind(client: str | None = None) -> str:
    """BUILDX where the client has the plugin, else BUILDKIT (no engine needed to tell)."""
    client = client or client_path()
    if client and has_buildx(client, dict(os.environ)):
        return BUILDX
    return BUILDKIT


def find_engine(host: str | None = None, client: str | None = None) -> Engine:
    """The builder to use here: buildx where the client has it, else `docker build` with BuildKit.

    Fails, naming what to install, when there is no Docker client or no engine answers.
    """
    client = client or client_path()
    if client is None or shutil.which(client) is None:
        raise ForkError(
            f"docker is not installed ({client or 'no `docker` on PATH'}); `invoke docker --dry-run` prints the command to run "
            "elsewhere, or `invoke docker --push --tag REGISTRY/REPO:TAG` pushes without an engine"
        )
    probe = Engine(client, BUILDKIT, host)
    kind = BUILDX if has_buildx(client, probe.environ()) else BUILDKIT
    engine = Engine(client, kind, host)
    proc = engine.run("version", "--format", "{{.Server.Version}}", check=False)
    if proc.returncode != 0:
        raise ForkError(
            f"no Docker engine answers ({client}; DOCKER_HOST={host or os.environ.get('DOCKER_HOST', 'default')}): "
            f"{proc.stderr.decode(errors='replace').strip()}\nStart one (e.g. `dockerd`), print the command "
            "to run elsewhere with `invoke docker --dry-run`, or push without an engine: "
            "`invoke docker --push --tag REGISTRY/REPO:TAG`."
        )
    return engine


def require_named_contexts(engine: Engine, route: str) -> None:
    """The wheel-in-Docker routes hand the ops seed in as a named build context."""
    if not engine.named_contexts:
        raise ForkError(
            f"--wheel-from {route} needs named build contexts (`--build-context ops-seed=DIR`) and "
            "`--output type=local`, which only `docker buildx build` has; this engine builds with "
            f"{engine.describe()}. Install the docker-buildx plugin, or run `invoke build` here and "
            "`invoke docker` (the default route, which needs neither)."
        )

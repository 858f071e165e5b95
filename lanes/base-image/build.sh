#!/usr/bin/env bash
# Build the local base images every eval image starts from, from local files only (no registry).
#
#   lanes/base-image/build.sh [--force] [debian|python|all]     (default: all)
#
#   local/debian:bookworm         debootstrap --variant=minbase bookworm, then `docker import`
#   local/debian-python:bookworm  local/debian:bookworm + python3, python3-venv, pip, nodejs, npm
#                                 (stands in for python:3.11-slim when building the orchestrator
#                                 image on a machine that cannot pull images)
#
# An image whose tag already exists is skipped (use --force to rebuild). The Debian mirror is the
# one apt on this machine uses (read from /etc/apt/sources.list*), or N8N_EVAL_DEBIAN_MIRROR.
# Machine trust and apt settings are carried into the image, derived here at run time:
#   - every CA in /usr/local/share/ca-certificates (N8N_EVAL_EXTRA_CA_DIR) is added to the image's
#     trust store, so TLS through this machine's egress works inside builds;
#   - when apt here runs with Acquire::Check-Valid-Until "false" (a snapshot mirror), so does the image.
# Needs root, debootstrap and a dockerd (DOCKER_HOST, default our private one from scripts/dockerd.sh).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export DOCKER_HOST="${DOCKER_HOST:-unix:///run/n8n-eval-docker.sock}"
export DOCKER_BUILDKIT=0
SUITE="${N8N_EVAL_DEBIAN_SUITE:-bookworm}"
DEBIAN_TAG="${N8N_EVAL_DEBIAN_IMAGE:-local/debian:${SUITE}}"
PYTHON_TAG="${N8N_EVAL_PYTHON_IMAGE:-local/debian-python:${SUITE}}"
EXTRA_CA_DIR="${N8N_EVAL_EXTRA_CA_DIR:-/usr/local/share/ca-certificates}"

force=0
what=all
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    debian|python|all) what="$arg" ;;
    *) echo "usage: $0 [--force] [debian|python|all]" >&2; exit 2 ;;
  esac
done

log() { echo "base-image: $*" >&2; }
die() { echo "base-image: $*" >&2; exit 1; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

apt_mirror() {
  # The first archive URI apt uses for $SUITE (not the security archive), from deb822 .sources
  # files or one-line sources.list entries.
  if [[ -n "${N8N_EVAL_DEBIAN_MIRROR:-}" ]]; then echo "$N8N_EVAL_DEBIAN_MIRROR"; return; fi
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    uri="$(awk -v suite="$SUITE" '
      function flush() { if (uris != "" && index(" " suites " ", " " suite " ") && types ~ /(^| )deb( |$)/) { split(uris, u, " "); print u[1]; found = 1; exit } uris = ""; suites = ""; types = "" }
      /^[[:space:]]*$/ { flush(); next }
      /^[[:space:]]*#/ { next }
      tolower($1) == "types:" { $1 = ""; types = $0 }
      tolower($1) == "uris:" { $1 = ""; sub(/^ +/, ""); uris = $0 }
      tolower($1) == "suites:" { $1 = ""; suites = $0 }
      END { if (!found) flush() }
    ' "$f")"
    if [[ -n "$uri" ]]; then echo "$uri"; return; fi
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    uri="$(awk -v suite="$SUITE" '
      $1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; exit } }
    ' "$f")"
    if [[ -n "$uri" ]]; then echo "$uri"; return; fi
  done
  die "no apt source for suite $SUITE in /etc/apt/sources.list*: set N8N_EVAL_DEBIAN_MIRROR"
}

build_debian() {
  if (( ! force )) && have_image "$DEBIAN_TAG"; then log "$DEBIAN_TAG exists, skipped"; return; fi
  command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install -y debootstrap"
  local mirror root t0 t1
  mirror="$(apt_mirror)"
  root="$(mktemp -d /var/tmp/n8n-eval-rootfs.XXXXXX)"
  trap 'rm -rf "$root"' EXIT
  t0=$SECONDS
  log "debootstrap --variant=minbase $SUITE from the mirror apt uses ($mirror)"
  debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$root" "$mirror" \
    >"$root.debootstrap.log" 2>&1 || { tail -n 20 "$root.debootstrap.log" >&2; die "debootstrap failed (log $root.debootstrap.log)"; }
  rm -f "$root.debootstrap.log"
  t1=$SECONDS
  shopt -s nullglob
  local cas=("$EXTRA_CA_DIR"/*.crt)
  if (( ${#cas[@]} )); then
    cp "${cas[@]}" "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
    log "added ${#cas[@]} CA certificate(s) from $EXTRA_CA_DIR"
  fi
  if apt-config dump 2>/dev/null | grep -qi '^Acquire::Check-Valid-Until "false"'; then
    printf 'Acquire::Check-Valid-Until "false";\n' >"$root/etc/apt/apt.conf.d/99n8n-eval-snapshot"
  fi
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$root/etc/apt/apt.conf.d/99n8n-eval-no-recommends"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/*
  tar --numeric-owner -C "$root" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase $SUITE" - "$DEBIAN_TAG" >/dev/null
  rm -rf "$root"
  trap - EXIT
  log "$DEBIAN_TAG built: debootstrap $((t1 - t0)) s, import $((SECONDS - t1)) s"
}

build_python() {
  if (( ! force )) && have_image "$PYTHON_TAG"; then log "$PYTHON_TAG exists, skipped"; return; fi
  local t0=$SECONDS
  docker build --network host --build-arg BASE_IMAGE="$DEBIAN_TAG" -t "$PYTHON_TAG" \
    -f "$HERE/Dockerfile.python" "$HERE" >&2
  log "$PYTHON_TAG built in $((SECONDS - t0)) s"
}

t_all=$SECONDS
case "$what" in
  debian) build_debian ;;
  python) have_image "$DEBIAN_TAG" || build_debian; build_python ;;
  all) build_debian; build_python ;;
esac
log "done in $((SECONDS - t_all)) s"

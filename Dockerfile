# The orchestrator image: the `orchestrator` CLI (this repo, pip-installed into a venv), Node and
# the pinned claude CLI. No secret is baked in: API keys come from the environment at run time.
#
#   DOCKER_BUILDKIT=0 docker build --network host -t n8n-eval-orchestrator .
#   DOCKER_BUILDKIT=0 docker build --network host --build-arg BASE_IMAGE=local/debian-python:bookworm -t n8n-eval-orchestrator .
#
# BASE_IMAGE is python:3.11-slim for real use. Where no registry can be reached, use the local
# stand-in from lanes/base-image/build.sh (Debian bookworm + python3, python3-venv, nodejs, npm).
# Whatever the base lacks of python3-venv, nodejs and npm is installed with apt.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ARG CLAUDE_CODE_VERSION=2.1.328
USER root
# The system trust store is handed to pip and npm explicitly: both otherwise use their own CA
# lists and ignore certificates the base image added (e.g. for a TLS-inspecting egress).
RUN set -eu; \
    need=""; \
    command -v node >/dev/null 2>&1 || need="$need nodejs"; \
    command -v npm >/dev/null 2>&1 || need="$need npm"; \
    python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need="$need python3-venv"; \
    if [ -n "$need" ]; then \
      apt-get update; \
      apt-get install -y --no-install-recommends ca-certificates $need; \
      apt-get clean; rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb; \
    fi; \
    python3 -c 'import sys; assert sys.version_info >= (3, 11), sys.version'; \
    node --version; npm --version
# claude goes where the orchestrator's toolchain looks for it (N8N_EVAL_CACHE/claude-<version>, with
# the .installed marker), so a run in the image never installs it from npm (a cluster pod has a
# read-only root, no npm egress, and must not change its claude per start).
ENV N8N_EVAL_CACHE=/opt/n8n-eval-cache
RUN set -eu; prefix="$N8N_EVAL_CACHE/claude-${CLAUDE_CODE_VERSION}"; mkdir -p "$prefix"; cd "$prefix"; \
    echo '{"name": "n8n-eval-cache", "private": true}' > package.json; \
    npm_config_cafile=/etc/ssl/certs/ca-certificates.crt npm install --no-audit --no-fund --loglevel=error \
      "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}"; \
    touch .installed; ln -s "$prefix/node_modules/.bin/claude" /usr/local/bin/claude; \
    npm cache clean --force >/dev/null 2>&1; \
    claude --version
COPY pyproject.toml README.md /src/
COPY orchestrator /src/orchestrator
RUN python3 -m venv /opt/orchestrator \
 && PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
    /opt/orchestrator/bin/pip install --no-cache-dir /src \
 && rm -rf /src \
 && /opt/orchestrator/bin/python -c "from pathlib import Path; from orchestrator.toolchain import Toolchain; \
tc = Toolchain(Path('$N8N_EVAL_CACHE')); assert tc.claude_ready() and tc.claude_bin.exists(), \
f'the image claude is not {tc.claude_version} (orchestrator/toolchain.py CLAUDE_VERSION)'"
COPY lanes/profiles /usr/local/share/n8n-eval-orchestrator/profiles
RUN useradd --create-home --home-dir /home/orchestrator --uid 10001 --user-group --shell /bin/sh orchestrator
ENV PATH=/opt/orchestrator/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ORCHESTRATOR_PROFILES_DIR=/usr/local/share/n8n-eval-orchestrator/profiles \
    PYTHONUNBUFFERED=1
USER orchestrator
WORKDIR /home/orchestrator
ENTRYPOINT ["orchestrator"]
CMD ["--help"]

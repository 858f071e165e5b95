#!/usr/bin/env python3
"""The lane image's content tag: ``<n8n version>-<16 hex of a SHA-256 over the image's inputs>``.

The inputs are everything the full build (``lanes/Dockerfile``, target ``lane``) reads: the
Dockerfile, the npm lockfile of n8n's dependency tree (``lanes/lock/package.json`` and
``package-lock.json``), the pinned Debian packages (``lanes/lock/apt-packages.txt``) and the build
arguments (``BASE_IMAGE`` — best a digest — and the versions). The same inputs give the same tag,
so CI rebuilding an unchanged image pushes nothing new and nodes pull nothing new; any change to
an input (a bumped pin, an edited Dockerfile, another base) gives another tag.

Standard library only (CI runs it before any install)::

    python3 lanes/image_tag.py [--root lanes] [--build-arg K=V ...]    # prints the tag

It fails (exit 1, one line) when the lockfile's n8n is not the version the build installs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

#: What the build reads, relative to the ``lanes/`` folder (the build context).
INPUTS = ("Dockerfile", "lock/package.json", "lock/package-lock.json", "lock/apt-packages.txt")


def lock_n8n_version(root: Path) -> str:
    lock = json.loads((root / "lock/package-lock.json").read_text())
    return str(lock["packages"]["node_modules/n8n"]["version"])


def effective_args(root: Path, build_args: Mapping[str, str]) -> dict[str, str]:
    """The Dockerfile's ``ARG`` defaults overridden by the given build arguments: a default passed
    explicitly gives the same tag as the default left out."""
    args: dict[str, str] = {}
    for m in re.finditer(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)=(\S*)", (root / "Dockerfile").read_text(), re.M):
        args.setdefault(m.group(1), m.group(2))
    return {**args, **build_args}


def content_hash(root: Path, build_args: Mapping[str, str]) -> str:
    """SHA-256 over each input's name and bytes, then the effective build arguments sorted by name."""
    build_args = effective_args(root, build_args)
    h = hashlib.sha256()
    for name in INPUTS:
        data = (root / name).read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    for key in sorted(build_args):
        h.update(f"arg\0{key}={build_args[key]}\0".encode())
    return h.hexdigest()


def content_tag(root: Path, build_args: Mapping[str, str]) -> str:
    n8n = lock_n8n_version(root)
    wanted = effective_args(root, build_args).get("N8N_VERSION", n8n)
    if wanted != n8n:
        raise ValueError(f"lanes/lock/package-lock.json pins n8n {n8n} but the build installs {wanted}: "
                         "regenerate the lockfile (see docs/cluster.md)")
    return f"{n8n}-{content_hash(root, build_args)[:16]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent, help="the lanes/ folder")
    parser.add_argument("--build-arg", action="append", default=[], metavar="K=V")
    args = parser.parse_args(argv)
    build_args = dict(a.split("=", 1) for a in args.build_arg)
    try:
        print(content_tag(args.root, build_args))
    except (ValueError, OSError, KeyError) as exc:
        print(f"image_tag: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

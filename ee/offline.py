#!/usr/bin/env python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Prepare an offline build of ee/execution-environment.yml: no Galaxy, no container registry.

    python ee/offline.py WORK_DIR BASE_IMAGE TAG

Writes WORK_DIR/execution-environment.yml, WORK_DIR/requirements.yml and WORK_DIR/collections/*.tar.gz, for
``ansible-builder build -f WORK_DIR/execution-environment.yml``. The definition is ee/execution-environment.yml
with only what an offline Debian base needs changed (offline_definition below); its collections are the same ones
ee/requirements.yml names, as local tarballs:

- gpuhost.nvidia from ``ansible-galaxy collection build`` of this checkout;
- the others from the copies the PyPI ``ansible`` package installed into this Python environment. Those cannot be
  packed as they are: their FILES.json lists files the PyPI package leaves out, and ansible-galaxy refuses a tarball
  whose files do not match it. So each is copied without MANIFEST.json and FILES.json, given a galaxy.yml made from
  its MANIFEST.json, and built again. A collection's dependencies are packed too (community.docker needs
  community.library_inventory_filtering_v1).

PyPI is reached here only through the machine's own pip configuration (its index and certificate authority), which a
container does not have. So every Python package the build installs is downloaded here first into
WORK_DIR/wheels (``pip download --only-binary :all:``): ansible-core and ansible-runner as the definition pins them,
ansible-builder's own tools (bindep, PyYAML, packaging, dumb-init), and the collections' requirements as
``ansible-builder introspect`` reads them from the installed tarballs. The build's pip then installs from those
wheels alone (PIP_NO_INDEX, PIP_FIND_LINKS), and the finished image forgets both.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import typing as t
from pathlib import Path

import ansible_collections
import yaml

REPO = Path(__file__).resolve().parents[1]
GALAXY_KEYS = ("namespace", "name", "version", "readme", "authors", "description", "license", "license_file", "tags",
               "dependencies", "repository", "documentation", "homepage", "issues")
# The base is a debootstrapped Debian 12 (minbase): no Python, apt lists not yet fetched.
WHEELS = "/opt/gpuhost-ee-wheels"
PREPEND_BASE = [
    "COPY _build/wheels %s" % WHEELS,
    "ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=%s" % WHEELS,
    "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-pip"
    " ca-certificates && apt-get clean",
]
# The final stage runs as root until ansible-builder's closing USER line; apt lists are kept until bindep has installed.
APPEND_FINAL = ["RUN apt-get clean && rm -rf /var/lib/apt/lists/* %s" % WHEELS, "ENV PIP_NO_INDEX=0 PIP_FIND_LINKS="]
# What ansible-builder's own stages install with pip (its generated Containerfile: the builder stage and container_init).
BUILDER_TOOLS = ["bindep", "pyyaml", "packaging", "dumb-init==1.2.5"]


def offline_definition(definition: dict[str, t.Any], base_image: str, tag: str) -> dict[str, t.Any]:
    """ee/execution-environment.yml for a Debian base built here: apt, Debian's pip, local tarballs, no Galaxy."""
    offline = copy.deepcopy(definition)
    offline["images"] = {"base_image": {"name": base_image}}
    offline.setdefault("build_arg_defaults", {}).update({
        # The tarballs are all there: ansible-galaxy must not ask a server for anything.
        "ANSIBLE_GALAXY_CLI_COLLECTION_OPTS": "--offline",
        # ansible-builder's scripts end with "$PKGMGR clean all", which apt-get refuses; APPEND_FINAL cleans apt.
        "PKGMGR_PRESERVE_CACHE": "always",
    })
    dependencies = offline["dependencies"]
    dependencies["galaxy"] = "requirements.yml"
    dependencies["python_interpreter"] = {"package_system": "python3", "python_path": "/usr/bin/python3"}
    steps = offline.setdefault("additional_build_steps", {})
    steps["prepend_base"] = PREPEND_BASE + list(steps.get("prepend_base") or [])
    steps["append_final"] = list(steps.get("append_final") or []) + APPEND_FINAL
    options = offline.setdefault("options", {})
    options["package_manager_path"] = "/usr/bin/apt-get"
    # Debian's python3 has no ensurepip; python3-pip comes from apt in PREPEND_BASE.
    options["skip_pip_install"] = True
    options["tags"] = [tag]
    offline["additional_build_files"] = list(offline.get("additional_build_files") or []) + [{"src": "wheels", "dest": "wheels"}]
    return offline


def requirement_names(requirements: dict[str, t.Any]) -> list[str]:
    """The Galaxy names in ee/requirements.yml (the entries that are not a local file)."""
    return [entry["name"] for entry in requirements["collections"] if entry.get("type", "galaxy") == "galaxy"]


def installed_source(fqcn: str) -> Path:
    namespace, _dot, name = fqcn.partition(".")
    for root in ansible_collections.__path__:
        candidate = Path(root) / namespace / name
        if (candidate / "MANIFEST.json").is_file():
            return candidate
    sys.exit("ee/offline.py: %s is not installed in this Python environment (no MANIFEST.json under %s); install the "
             "PyPI ansible package (make venv)" % (fqcn, ", ".join(ansible_collections.__path__)))


def galaxy_build(source: Path, out: Path) -> None:
    subprocess.run([str(Path(sys.executable).parent / "ansible-galaxy"), "collection", "build", "--force", "--output-path",
                    str(out), str(source)], check=True, capture_output=True, text=True)


def repack(fqcn: str, out: Path, work: Path) -> tuple[Path, dict[str, str]]:
    """Build a Galaxy tarball of an installed collection; return it and the collection's dependencies."""
    src = installed_source(fqcn)
    info = json.loads((src / "MANIFEST.json").read_text(encoding="utf-8"))["collection_info"]
    galaxy = {key: info[key] for key in GALAXY_KEYS if info.get(key)}
    if galaxy.get("license"):
        galaxy.pop("license_file", None)
    galaxy.setdefault("readme", "README.md")
    tree = work / fqcn
    shutil.copytree(src, tree, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "MANIFEST.json", "FILES.json"))
    if not (tree / galaxy["readme"]).is_file():
        (tree / galaxy["readme"]).write_text("%s\n" % fqcn, encoding="utf-8")
    (tree / "galaxy.yml").write_text(yaml.safe_dump(galaxy), encoding="utf-8")
    galaxy_build(tree, out)
    return out / ("%s-%s-%s.tar.gz" % (info["namespace"], info["name"], info["version"])), info.get("dependencies") or {}


def download_wheels(work: Path, definition: dict[str, t.Any], tarballs: list[Path]) -> int:
    """Download every wheel the build installs into work/wheels; return how many there are."""
    bin_dir = Path(sys.executable).parent
    wheels = work / "wheels"
    wheels.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuhost-ee-introspect-") as tmp:
        subprocess.run([str(bin_dir / "ansible-galaxy"), "collection", "install", "--offline", "--force", "--no-deps", "-p", tmp]
                       + [str(tarball) for tarball in tarballs], check=True, capture_output=True, text=True,
                       env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=tmp))
        requirements = Path(tmp) / "requirements.txt"
        subprocess.run([str(bin_dir / "ansible-builder"), "introspect", "--write-pip", str(requirements), tmp],
                       check=True, capture_output=True, text=True)
        dependencies = definition["dependencies"]
        pins = [dependencies[key]["package_pip"] for key in ("ansible_core", "ansible_runner") if key in dependencies]
        proc = subprocess.run([str(bin_dir / "python"), "-m", "pip", "download", "--quiet", "--only-binary", ":all:", "-d",
                               str(wheels), "-r", str(requirements)] + pins + BUILDER_TOOLS, capture_output=True, text=True,
                              check=False)
        if proc.returncode:
            sys.exit("ee/offline.py: pip download failed (a package without a wheel, or no index):\n" + proc.stderr[-3000:])
    return len(list(wheels.glob("*.whl")))


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.exit(__doc__)
    work, base_image, tag = Path(argv[0]).resolve(), argv[1], argv[2]
    collections = work / "collections"
    if collections.exists():
        shutil.rmtree(collections)
    collections.mkdir(parents=True)
    galaxy_build(REPO, collections)
    todo = requirement_names(yaml.safe_load((REPO / "ee" / "requirements.yml").read_text(encoding="utf-8")))
    done: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="gpuhost-ee-") as tmp:
        while todo:
            fqcn = todo.pop(0)
            if fqcn not in done:
                done.add(fqcn)
                todo.extend(sorted(repack(fqcn, collections, Path(tmp))[1]))
    tarballs = sorted(collections.glob("*.tar.gz"))
    (work / "requirements.yml").write_text(yaml.safe_dump({"collections": [
        {"name": "collections/%s" % tarball.name, "type": "file"} for tarball in tarballs]}, sort_keys=False), encoding="utf-8")
    definition = yaml.safe_load((REPO / "ee" / "execution-environment.yml").read_text(encoding="utf-8"))
    (work / "execution-environment.yml").write_text(yaml.safe_dump(offline_definition(definition, base_image, tag),
                                                                   sort_keys=False, width=200), encoding="utf-8")
    for tarball in tarballs:
        print(tarball.name)
    print("%d wheels" % download_wheels(work, definition, tarballs))


if __name__ == "__main__":
    main(sys.argv[1:])

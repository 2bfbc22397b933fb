# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The execution-environment files, read by ansible-builder's own code (no image is built: tests/ee/run.sh does that).

- meta/execution-environment.yml, as ansible-builder's introspection reads it from an installed collection: our
  controller-side Python and system requirements, and nothing of the test machine's bindep.txt;
- ee/execution-environment.yml, through ansible-builder's schema and ``ansible-builder create``: the generated
  Containerfile installs ansible-core and ansible-runner as pinned in requirements/dev.txt, the collections of
  ee/requirements.yml, and takes the base image as the EE_BASE_IMAGE build argument;
- the offline copy ee/offline.py derives from it for `make ee` (apt, local wheels, no Galaxy).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

_TRACEBACK_LIMIT = getattr(sys, "tracebacklimit", None)
ansible_builder = pytest.importorskip("ansible_builder", reason="ansible-builder is in requirements/dev.txt (make venv)")
from ansible_builder._target_scripts import introspect  # noqa: E402  pylint: disable=wrong-import-position
from ansible_builder.ee_schema import validate_schema  # noqa: E402  pylint: disable=wrong-import-position
from ansible_builder.exceptions import DefinitionError  # noqa: E402  pylint: disable=wrong-import-position

# ansible-builder's exceptions module sets sys.tracebacklimit = 0 when it is imported (its command line prints short
# errors). Imported here at collection, that would empty every traceback of the whole test session, so it is put back.
if _TRACEBACK_LIMIT is None:
    if hasattr(sys, "tracebacklimit"):
        del sys.tracebacklimit
else:
    sys.tracebacklimit = _TRACEBACK_LIMIT

ROOT = Path(__file__).resolve().parents[3]
BUILDER = Path(sys.executable).parent / "ansible-builder"


def _load(path: str) -> t.Any:
    return yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))


def _offline_module() -> t.Any:
    spec = importlib.util.spec_from_file_location("gpuhost_ee_offline", ROOT / "ee" / "offline.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pins() -> dict[str, str]:
    """requirements/dev.txt's exact pins, by lower-case package name."""
    pins = {}
    for line in (ROOT / "requirements" / "dev.txt").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _create(definition: Path, context: Path) -> str:
    """``ansible-builder create``: validates the definition and writes the build context; returns the Containerfile."""
    proc = subprocess.run([str(BUILDER), "create", "-f", str(definition), "--context", str(context)],
                          capture_output=True, text=True, check=False, cwd=definition.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (context / "Containerfile").read_text(encoding="utf-8")


def test_collection_metadata_as_ansible_builder_reads_it(tmp_path: Path) -> None:
    meta = _load("meta/execution-environment.yml")
    assert meta["version"] == 1
    assert meta["dependencies"] == {"python": "meta/ee-requirements.txt", "system": "meta/ee-bindep.txt"}
    # Both files must travel in the collection tarball, or ansible-builder silently finds nothing.
    ignored = _load("galaxy.yml").get("build_ignore", [])
    for path in meta["dependencies"].values():
        assert (ROOT / path).is_file()
        assert not any(Path(path).match(pattern) or path.startswith(pattern.rstrip("/") + "/") for pattern in ignored), path
    # The collection as installed: ansible_collections/gpuhost/nvidia (introspection follows galaxy.yml or MANIFEST.json).
    installed = tmp_path / "ansible_collections" / "gpuhost"
    installed.mkdir(parents=True)
    (installed / "nvidia").symlink_to(ROOT)
    found = introspect.process(data_dir=str(tmp_path))
    python = [line.split("#")[0].strip() for line in found["python"]["gpuhost.nvidia"]]
    system = [line.split("#")[0].strip() for line in found["system"]["gpuhost.nvidia"]]
    assert python == ["PyYAML>=5.1"]
    assert system == ["openssh-client [platform:dpkg]", "openssh-clients [platform:rpm]"]
    # The hosts' libraries are installed by the roles, never in the EE.
    for host_side in ("nvidia-ml-py", "docker", "python3-apt"):
        assert not any(line.lower().startswith(host_side) for line in python + system), host_side


def test_bindep_profiles_keep_the_test_machine_out_of_the_ee() -> None:
    """bindep.txt (the test machine) yields nothing without the test profile; meta/ee-bindep.txt the ssh client per family.

    Read with bindep's own parser and profile selection (what ansible-builder's assemble step runs), for a Debian and
    a RHEL-family EE; nothing is asked of this machine's package manager.
    """
    depends = pytest.importorskip("bindep.depends", reason="bindep is in requirements/dev.txt (make venv)")
    debian = ["platform:dpkg", "platform:debian", "platform:debian-12"]
    rhel = ["platform:rpm", "platform:redhat", "platform:rhel-9"]

    parsed = {path: depends.Depends((ROOT / path).read_text(encoding="utf-8")) for path in ("bindep.txt", "meta/ee-bindep.txt")}

    def listed(path: str, profiles: list[str]) -> list[str]:
        return [rule[0] for rule in parsed[path].active_rules(profiles)]

    assert listed("bindep.txt", debian) == [] and listed("bindep.txt", rhel) == []
    install = subprocess.run([str(ROOT / "tests" / "deps" / "install.sh"), "--list"], capture_output=True, text=True, check=True)
    assert listed("bindep.txt", debian + ["test"]) == install.stdout.split()
    assert listed("meta/ee-bindep.txt", debian) == ["openssh-client"]
    assert listed("meta/ee-bindep.txt", rhel) == ["openssh-clients"]


def test_ee_definition_builds_this_collection_on_a_chosen_base(tmp_path: Path) -> None:
    definition = _load("ee/execution-environment.yml")
    validate_schema(definition)
    assert definition["version"] == 3
    pins = _pins()
    dependencies = definition["dependencies"]
    assert dependencies["ansible_core"]["package_pip"] == "ansible-core==%s" % pins["ansible-core"]
    assert dependencies["ansible_runner"]["package_pip"] == "ansible-runner==%s" % pins["ansible-runner"]

    containerfile = _create(ROOT / "ee" / "execution-environment.yml", tmp_path / "context")
    assert 'ARG EE_BASE_IMAGE="quay.io/ansible/awx-ee:latest"' in containerfile
    assert re.search(r"^FROM \$EE_BASE_IMAGE AS base$", containerfile, re.M)
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==%s ansible-runner==%s"' % (
        pins["ansible-core"], pins["ansible-runner"]) in containerfile
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    # The introspection that merges every collection's meta/execution-environment.yml runs in the builder stage.
    assert "introspect.py introspect" in containerfile
    assert (tmp_path / "context" / "_build" / "requirements.yml").is_file()


def test_ee_requirements_name_this_collection_and_the_tested_ones() -> None:
    requirements = _load("ee/requirements.yml")["collections"]
    galaxy = _load("galaxy.yml")
    files = [entry["name"] for entry in requirements if entry.get("type") == "file"]
    assert files == ["collections/%s-%s-%s.tar.gz" % (galaxy["namespace"], galaxy["name"], galaxy["version"])]
    by_name = {entry["name"]: entry.get("version", "*") for entry in requirements if entry.get("type", "galaxy") == "galaxy"}
    assert set(by_name) == {"kubernetes.core", "community.general", "ansible.posix", "community.docker"}
    # The versions the venv holds (the PyPI ansible package the tests run) satisfy the ranges named.
    from ansible.galaxy.dependency_resolution.versioning import meets_requirements  # pylint: disable=import-outside-toplevel

    offline = _offline_module()
    for fqcn, spec in by_name.items():
        manifest = offline.installed_source(fqcn) / "MANIFEST.json"
        version = yaml.safe_load(manifest.read_text(encoding="utf-8"))["collection_info"]["version"]
        assert meets_requirements(version, spec), (fqcn, version, spec)
    # galaxy.yml's own dependencies are all in the EE.
    assert set(galaxy.get("dependencies", {})) <= set(by_name)


def test_offline_definition_for_make_ee(tmp_path: Path) -> None:
    offline = _offline_module()
    user = _load("ee/execution-environment.yml")
    derived = offline.offline_definition(user, "localhost/gpuhost-bookworm-base:abc", "localhost/gpuhost-nvidia-ee:test")
    assert user["options"]["package_manager_path"] == "/usr/bin/dnf"  # the user's definition is not changed
    validate_schema(derived)
    with pytest.raises(DefinitionError):
        validate_schema(dict(derived, options=dict(derived["options"], package_manager="apt")))
    work = tmp_path / "definition"
    (work / "collections").mkdir(parents=True)
    (work / "wheels").mkdir()
    (work / "requirements.yml").write_text("collections: []\n", encoding="utf-8")
    (work / "execution-environment.yml").write_text(yaml.safe_dump(derived), encoding="utf-8")
    containerfile = _create(work / "execution-environment.yml", tmp_path / "context")
    assert 'ARG EE_BASE_IMAGE="localhost/gpuhost-bookworm-base:abc"' in containerfile
    assert 'ARG PKGMGR="/usr/bin/apt-get"' in containerfile
    assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--offline"' in containerfile
    assert "ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=%s" % offline.WHEELS in containerfile
    assert "ENV PIP_NO_INDEX=0 PIP_FIND_LINKS=" in containerfile  # the finished image forgets the local wheels
    assert "ensurepip" not in containerfile and "pip_install $PYCMD" not in containerfile
    assert (tmp_path / "context" / "_build" / "wheels").is_dir()

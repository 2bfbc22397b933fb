# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The compose CLI on the host: which compose command answers, the project's compose files, and the validator that
runs ``compose config -q`` over the project with a candidate override.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The planner (_compose) never touches the host; this is the part of gpu_compose_override that does, kept out of the
module file so that the module only wires options to it.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose, _files

if t.TYPE_CHECKING:  # pragma: no cover
    from ansible.module_utils.basic import AnsibleModule

# The names compose itself looks for, in its order, when no -f is given.
DEFAULT_COMPOSE_FILES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")
ENV_C = {"LC_ALL": "C", "LANGUAGE": "C"}


def compose_command(module: AnsibleModule) -> list[str] | None:
    """``docker compose`` (v2) when the plugin answers, else ``docker-compose``; None when neither exists."""
    docker = module.get_bin_path("docker")
    if docker:
        rc, _out, _err = module.run_command([docker, "compose", "version"], environ_update=ENV_C)
        if rc == 0:
            return [docker, "compose"]
    legacy = module.get_bin_path("docker-compose")
    return [legacy] if legacy else None


def base_files(path: str, given: list[str]) -> tuple[list[str], list[str]]:
    """The project's compose files (relative ones in the directory of ``path``) and those of them that are missing.
    Raises FileError for one that is not a regular file."""
    directory = os.path.dirname(path)
    if given:
        return given, [name for name in given if not _files.check_file(os.path.join(directory, name), "compose_files")]
    for name in DEFAULT_COMPOSE_FILES:
        candidate = os.path.join(directory, name)
        if os.path.lexists(candidate) and _files.check_file(candidate, "the project's compose file"):
            return [candidate], []
    return [], []


def refuse_base_requests(module: AnsibleModule, path: str, given: list[str], services: t.Iterable[str]) -> None:
    """base_requests=refuse: fail, before anything is written, when a project compose file requests GPUs for a managed
    service, or cannot be read to tell (what it requests is then unknown)."""
    documents = []
    try:
        files, missing = base_files(path, given)
        for name in files:
            full = os.path.join(os.path.dirname(path), name)
            data = _files.read_bytes(full, "compose_files")
            if data is not None:
                documents.append((full, _compose.parse(data.decode("utf-8"), full)))
    except (_files.FileError, _compose.ComposeError, UnicodeDecodeError) as exc:
        module.fail_json(msg="base_requests=refuse: a project compose file cannot be read to check it for GPU requests "
                             "of the managed services, so the override could widen them: %s" % exc, path=path)
    if missing:
        use = "to validate with" if module.params.get("validate") else "to check for GPU requests"
        module.fail_json(msg="compose_files: compose file(s) %s do not exist: %s" % (use, ", ".join(missing)), path=path)
    errors = _compose.base_request_errors(documents, services)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors, path=path)


class Validator:
    """``validate`` for _files.write_file: the project's files plus the candidate override through ``config -q``.

    Fails the module, naming the command and its output, when the merged project does not validate. ``used`` holds
    the command line once it ran.
    """

    def __init__(self, module: AnsibleModule, path: str, given: list[str]):
        self.module = module
        self.path = path
        self.used: list[str] | None = None
        try:
            self.files, missing = base_files(path, given)
        except _files.FileError as exc:
            module.fail_json(msg="a compose file to validate with cannot be used: %s" % exc, path=path)
        if missing:
            module.fail_json(msg="compose_files: compose file(s) to validate with do not exist: %s" % ", ".join(missing), path=path)
        command = compose_command(module)
        if command is None:
            module.fail_json(msg="validate=true needs docker compose or docker-compose on the host, and neither was found", path=path)
        self.command: list[str] = command

    def __call__(self, tmp: str) -> None:
        args = [*self.command, "--project-directory", os.path.dirname(self.path)]
        for name in self.files:
            args += ["-f", name]
        args += ["-f", tmp, "config", "-q"]
        rc, out, err = self.module.run_command(args, environ_update=ENV_C, cwd=os.path.dirname(self.path))
        self.used = args
        if rc != 0:
            self.module.fail_json(
                msg="The merged compose project does not validate (%s exited %d): %s" % (" ".join(self.command), rc, (err or out).strip()),
                cmd=args, rc=rc, stdout=out, stderr=err, path=self.path,
            )

"""Test-only connection: containers.podman.podman with pipelining.

The upstream plugin runs each module as four ``podman exec`` calls (mkdir, copy, run, remove), about 1.4 s
a task on the test machine. With pipelining the module goes to python on ``podman exec -i``'s stdin in one
call, as it does over ssh with pipelining, which is how most users run the collection; a Molecule run takes
about half the time. Only the Molecule scenarios under molecule/ use this (see .config/molecule/config.yml).
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase
from ansible_collections.containers.podman.plugins.connection import podman as _upstream

DOCUMENTATION = r"""
name: gpuhost_podman
short_description: Run tasks in an existing podman container, with pipelining (test-only)
description:
  - containers.podman.podman whose modules are piped to C(podman exec -i).
options:
  remote_addr:
    description: The name or ID of the container.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: The user to run commands as inside the container.
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments to pass to the podman command line.
    default: ''
    vars:
      - name: ansible_podman_extra_args
  podman_executable:
    description: Executable for the podman command.
    default: podman
    vars:
      - name: ansible_podman_executable
"""


class Connection(_upstream.Connection):
    """containers.podman.podman, but modules are piped to ``podman exec -i``."""

    transport = "gpuhost_podman"
    has_pipelining = True

    def exec_command(self, cmd, in_data=None, sudoable=False):
        if not self._connected:
            self._connect()
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec", "-i"] if in_data is not None else ["exec"]
        if self.user:
            args.extend(("--user", self.user))
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

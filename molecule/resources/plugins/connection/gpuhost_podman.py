"""Test-only connection: containers.podman.podman with pipelining and a per-container command agent.

The upstream plugin runs ``podman mount`` when it connects (every task) and each module as four ``podman exec``
calls (mkdir, copy, run, remove), about 1.4 s a task on the test machine. This one pipes the module to python on
stdin in one call, as ssh with pipelining does (how most users run the collection), and sends that call to the
container's command agent (molecule/resources/gpuhost_agent.py, started by create.yml), which runs it exactly as
``podman exec`` would, without starting podman, conmon and runc for it. A container without an agent socket
gets ``podman exec -i``. Only the Molecule scenarios under molecule/ use this (.config/molecule/config.yml).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display
from ansible_collections.containers.podman.plugins.connection import podman as _upstream

try:
    import gpuhost_agent
except ImportError:  # PYTHONPATH without molecule/resources (Molecule's env sets it)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import gpuhost_agent

DOCUMENTATION = r"""
name: gpuhost_podman
short_description: Run tasks in an existing podman container through its command agent (test-only)
description:
  - containers.podman.podman whose modules are piped to python, through the container's command agent
    (molecule/resources/gpuhost_agent.py) when it has one, else through C(podman exec -i).
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
  agent_dir:
    description: Controller directory holding one sub-directory per container, with the agent's socket.
    default: /tmp/gpuhost-agent  # gpuhost_agent.AGENT_DIR
    vars:
      - name: gpuhost_agent_dir
"""

display = Display()


class Connection(_upstream.Connection):
    """containers.podman.podman, but modules are piped to python through the container's agent."""

    transport = "gpuhost_podman"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._agent_path = None

    def _connect(self):
        # Whether the container has an agent is decided once per connection. `podman mount` (upstream) is only
        # needed to copy files without it.
        self._agent_path = None if self.user else gpuhost_agent.socket_path(  # the agent runs commands as root only
            self._container_id, self.get_option("agent_dir"))
        if self._agent_path is None:
            return super()._connect()
        ConnectionBase._connect(self)
        self._mount_point = None
        self._connected = True
        return self

    def _agent_socket(self):
        """The container's agent socket, or None: connects first if needed."""
        if not self._connected:
            self._connect()
        return self._agent_path

    def _agent_run(self, path, argv, in_data=None):
        display.vvv(f"AGENT {argv}", host=self._container_id)
        try:
            return gpuhost_agent.call(path, [to_native(arg, errors="surrogate_or_strict") for arg in argv], in_data)
        except (OSError, ValueError) as exc:
            raise AnsibleError(f"the command agent of container {self._container_id} ({path}) failed: {exc}") from exc

    def exec_command(self, cmd, in_data=None, sudoable=False):
        path = self._agent_socket()
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        argv = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        if path is not None:
            return self._agent_run(path, argv, in_data)
        args = ["exec", "-i"] if in_data is not None else ["exec"]
        if self.user:
            args.extend(("--user", self.user))
        return self._podman(args, argv, in_data)

    def put_file(self, in_path, out_path):
        path = self._agent_socket()
        if path is None:
            return super().put_file(in_path, out_path)
        ConnectionBase.put_file(self, in_path, out_path)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as source:
            data = source.read()
        rc, dummy, stderr = self._agent_run(path, ["/bin/sh", "-c", 'cat > "$1"', "sh", out_path], data)
        if rc != 0:
            raise AnsibleError(f"Failed to copy {in_path} to {out_path} in container {self._container_id}: {stderr!r}")
        return None

    def fetch_file(self, in_path, out_path):
        path = self._agent_socket()
        if path is None:
            return super().fetch_file(in_path, out_path)
        ConnectionBase.fetch_file(self, in_path, out_path)
        rc, stdout, stderr = self._agent_run(path, ["cat", in_path])
        if rc != 0:
            raise AnsibleError(f"Failed to fetch {in_path} from container {self._container_id}: {stderr!r}")
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as target:
            target.write(stdout)
        return None

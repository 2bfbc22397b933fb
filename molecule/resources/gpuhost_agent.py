"""Test-only command agent for the Molecule test hosts, server and client.

Starting ``podman exec`` costs about 0.2 s of CPU (podman, conmon and runc each start), and the upstream
podman connection adds a ``podman mount`` to every task; on the 2-core test machine that was a large part of
a Molecule run. So create.yml starts this file once per test container, as ``podman exec -d ...
gpuhost_agent.py SOCKET``: it runs in the container's namespaces, cgroup, environment, user and working
directory exactly as a ``podman exec`` command does, and listens on a unix socket in a directory that
create.yml bind-mounts from the controller (``/tmp/gpuhost-agent/<container>`` there, /run/gpuhost-agent in
the container). For each connection it runs one command and returns its exit status, stdout and stderr.

The clients are the gpuhost_podman connection plugin (every Ansible task) and gpuhost_testinfra's ``host``
fixture (every testinfra command). Both fall back to ``podman exec`` for a container without a socket.

Protocol, one command per connection:
  request   one JSON line {"argv": [...], "stdin": N or null}, then N bytes of standard input
  response  one JSON line {"rc": RC, "stdout": N, "stderr": M}, then N + M bytes
A null "stdin" gives the command /dev/null, as ``podman exec`` without ``-i`` does.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import subprocess
import sys

AGENT_DIR = "/tmp/gpuhost-agent"  # on the controller; create.yml and destroy.yml use the same path


def socket_path(container: str, agent_dir: str = AGENT_DIR) -> str | None:
    """The agent socket of ``container`` on the controller, or None when it has none."""
    path = os.path.join(agent_dir, container, "agent.sock")
    return path if os.path.exists(path) else None


def _read_exact(stream, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise ConnectionError(f"gpuhost_agent closed the connection after {len(data)} of {size} bytes")
    return data


def call(path: str, argv: list[str], stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    """Run ``argv`` through the agent at ``path``; return (exit status, stdout, stderr)."""
    request = json.dumps({"argv": argv, "stdin": None if stdin is None else len(stdin)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(request + b"\n" + (stdin or b""))
        with sock.makefile("rb") as stream:
            line = stream.readline()
            if not line:
                raise ConnectionError(f"gpuhost_agent at {path} answered nothing for {argv}")
            reply = json.loads(line)
            return reply["rc"], _read_exact(stream, reply["stdout"]), _read_exact(stream, reply["stderr"])


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        request = json.loads(self.rfile.readline())
        size = request.get("stdin")
        data = _read_exact(self.rfile, size) if size is not None else None
        try:
            proc = subprocess.run(
                request["argv"],
                input=data,
                stdin=subprocess.DEVNULL if data is None else None,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                check=False,
            )
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except OSError as exc:  # the command does not exist or cannot run: exit 127, as podman exec reports it
            rc, out, err = 127, b"", f"gpuhost_agent: {request['argv'][0]}: {exc.strerror}\n".encode()
        header = {"rc": rc, "stdout": len(out), "stderr": len(err)}
        self.wfile.write(json.dumps(header).encode() + b"\n" + out + err)


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def serve(path: str) -> None:
    """Serve commands on the unix socket ``path`` until killed."""
    # No umask change: the commands inherit this process's, which is podman exec's. The socket's directory on
    # the controller is root's alone (create.yml).
    if os.path.exists(path):
        os.unlink(path)
    with _Server(path, _Handler) as server:
        server.serve_forever()


if __name__ == "__main__":
    serve(sys.argv[1])

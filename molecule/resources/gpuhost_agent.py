"""Test-only command agent for the Molecule test hosts, server and client.

Starting ``podman exec`` costs about 0.2 s of CPU (podman, conmon and runc each start), and the upstream
podman connection adds a ``podman mount`` to every task; on the 2-core test machine that was a large part of
a Molecule run. So create.yml starts this file once per test container, as ``podman exec -d ...
gpuhost_agent.py serve SOCKET``: it runs in the container's namespaces, cgroup, environment, user and working
directory exactly as a ``podman exec`` command does, and listens on a unix socket in a directory that
create.yml bind-mounts from the controller (``/tmp/gpuhost-agent/<container>`` there, /run/gpuhost-agent in
the container). For each connection it runs one command and returns its exit status, stdout and stderr.

The clients are the gpuhost_podman connection plugin (every Ansible task) and gpuhost_testinfra's ``host``
fixture (every testinfra command). Both fall back to ``podman exec`` for a container without a socket.

On the controller, the same file sets the agents up (create.yml, destroy.yml and gpuhost_testinfra's fresh hosts):
  gpuhost_agent.py prepare NAME...   a directory per container with this file in it; prints {NAME: volume} as JSON,
                                     the bind mount to give the container
  gpuhost_agent.py start NAME...     once the containers run: start each agent with podman exec -d, wait for sockets
  gpuhost_agent.py forget NAME...    remove the directories
In the container: gpuhost_agent.py serve SOCKET.

Protocol, one command per connection:
  request   one JSON line {"argv": [...], "stdin": N or null}, then N bytes of standard input
  response  one JSON line {"rc": RC, "stdout": N, "stderr": M}, then N + M bytes
A null "stdin" gives the command /dev/null, as ``podman exec`` without ``-i`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import time

AGENT_DIR = "/tmp/gpuhost-agent"  # on the controller (the gpuhost_podman connection's agent_dir default)
MOUNT = "/run/gpuhost-agent"  # in the container


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


def prepare(names: list[str]) -> dict[str, str]:
    """Give each container a fresh agent directory holding this file; return the bind mount each needs."""
    volumes = {}
    for name in names:
        directory = os.path.join(AGENT_DIR, name)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if os.path.exists(os.path.join(directory, "agent.sock")):  # left by a container removed without destroy
            os.unlink(os.path.join(directory, "agent.sock"))
        shutil.copyfile(__file__, os.path.join(directory, "gpuhost_agent.py"))
        volumes[name] = f"{directory}:{MOUNT}"
    return volumes


def start(names: list[str], timeout: float = 30.0) -> None:
    """Start the agent in each running container (prepared, with its volume) and wait for the sockets."""
    for name in names:
        subprocess.run(["podman", "exec", "--detach", name, "/usr/bin/python3", f"{MOUNT}/gpuhost_agent.py", "serve",
                        f"{MOUNT}/agent.sock"], check=True, capture_output=True)
    deadline = time.monotonic() + timeout
    waiting = [name for name in names if socket_path(name) is None]
    while waiting:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no agent socket after {timeout:.0f} s in: {', '.join(waiting)}")
        time.sleep(0.05)
        waiting = [name for name in waiting if socket_path(name) is None]


def forget(names: list[str]) -> None:
    """Remove the containers' agent directories."""
    for name in names:
        shutil.rmtree(os.path.join(AGENT_DIR, name), ignore_errors=True)


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    if command == "serve" and len(args) == 1:
        serve(args[0])
    elif command == "prepare":
        print(json.dumps(prepare(args)))
    elif command == "start":
        start(args)
    elif command == "forget":
        forget(args)
    else:
        print("usage: gpuhost_agent.py serve SOCKET | prepare NAME... | start NAME... | forget NAME...", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

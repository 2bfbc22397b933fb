#!/usr/bin/env python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Converge Debian 12 systemd test hosts with playbooks/site.yml run inside the execution environment.

    .venv/bin/python tests/ee/converge.py --image localhost/gpuhost-nvidia-ee:latest [--keep]

Two hosts from ``localhost/gpuhost-debian12`` (tests/hosts) with openssh-server, on podman's default network: the
EE container reaches them over SSH at their addresses there, as an AWX job reaches its hosts. Their variables are
the site scenario's Debian ones (molecule/site/molecule.yml: forced driver, the toolkit from the local signed test
repository mounted at /srv/gpuhost-repos), so nothing comes from NVIDIA.

1. ``ansible-navigator run playbooks/site.yml --eei IMAGE --mode stdout --pull-policy never`` converges the first host
   (no failure, something changed), and a second navigator run reports changed=0.
2. ``ansible-runner run PRIVATE_DATA_DIR -p site.yml --container-image IMAGE --process-isolation`` converges the
   second host, with a private data dir laid out as AWX lays one: inventory/hosts.yml, env/extravars (the role
   variables, as a job template's extra variables), env/envvars, env/ssh_key (the machine credential's key, which
   ansible-runner loads into an ssh-agent inside the EE) and project/ (this checkout's playbooks/).

Exits non-zero naming the step that failed; prints each step's time and recap.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
HOST_IMAGE = "localhost/gpuhost-debian12:latest"
HOSTS = ("gpuhost-ee-navigator", "gpuhost-ee-runner")
PODMAN_ENV = dict(os.environ, CONTAINERS_CONF=os.environ.get("CONTAINERS_CONF", str(REPO / "tests" / "hosts" / "containers.conf")))
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
# ansible-runner's output came back coloured (SGR sequences around each count of the recap) with
# ANSIBLE_FORCE_COLOR=False in its envvars (2026-11-29): the recap is read without them.
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SSH_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ControlMaster=auto -o ControlPersist=60s"


def podman(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=PODMAN_ENV, check=True, capture_output=True, text=True, **kwargs)


def start_host(name: str, public_key: str) -> str:
    """Start a test host with sshd and the site scenario's compose project; return its address on podman's network."""
    subprocess.run(["podman", "rm", "-f", name], env=PODMAN_ENV, capture_output=True, check=False)
    repos = (REPO / ".cache" / "repos" / "current").resolve()
    podman("run", "-d", "--name", name, "--systemd=always", "-v", "%s:/srv/gpuhost-repos:ro" % repos, HOST_IMAGE, "/sbin/init")
    script = ("until systemctl is-system-running --wait >/dev/null 2>&1 || [ $? -ne 1 ]; do sleep 1; done; "
              "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null && "
              "install -d -m 0700 /root/.ssh && printf '%s' \"$KEY\" > /root/.ssh/authorized_keys && systemctl restart ssh && "
              "install -d /srv/gpu-demo && printf 'services:\\n  app:\\n    image: busybox\\n    command: [sleep, infinity]\\n'"
              " > /srv/gpu-demo/compose.yaml")
    podman("exec", "-e", "KEY=" + public_key, name, "bash", "-c", script)
    address = podman("inspect", "-f", "{{.NetworkSettings.IPAddress}}", name).stdout.strip()
    if not address:
        sys.exit("tests/ee: %s has no address on podman's default network" % name)
    return address


def site_variables() -> dict:
    """The site scenario's variables for its Debian hosts (over the shared Molecule config's), with its lookups resolved
    here (the EE has no checkout)."""
    shared = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text(encoding="utf-8"))
    scenario = yaml.safe_load((REPO / "molecule" / "site" / "molecule.yml").read_text(encoding="utf-8"))
    groups = scenario["provisioner"]["inventory"]["group_vars"]
    # nvidia_driver_secure_boot: "false" among them: a container cannot read the firmware's Secure Boot state.
    variables = dict(shared["provisioner"]["inventory"]["group_vars"]["all"], **groups["all"])
    variables.update(groups["debian"])
    for name in ("gpuhost_summary_dir", "gpuhost_fast_path"):
        variables.pop(name, None)
    fingerprint = (REPO / ".cache" / "repos" / "current" / "key" / "fingerprint").read_text(encoding="utf-8").strip()
    variables["nvidia_container_toolkit_repo_key_fingerprint"] = fingerprint
    leftover = [key for key, value in variables.items() if "lookup(" in str(value)]
    if leftover:
        sys.exit("tests/ee: molecule/site's variables %s use a lookup this test does not resolve" % leftover)
    return variables


def connection(address: str) -> dict:
    return {"ansible_host": address, "ansible_port": 22, "ansible_user": "root",
            "ansible_python_interpreter": "/usr/bin/python3", "ansible_ssh_common_args": SSH_ARGS}


def recap(output: str, host: str) -> dict[str, int]:
    for match in RECAP.finditer(ANSI.sub("", output)):
        if match.group(1) == host:
            return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups()[1:])))
    return {}


def check(label: str, proc: subprocess.CompletedProcess, host: str, elapsed: float, changed: bool | None) -> dict[str, int]:
    counts = recap(proc.stdout, host)
    print("%-44s %6.1f s  rc=%d  %s" % (label, elapsed, proc.returncode, counts or "no recap"))
    problem = ""
    if proc.returncode != 0 or not counts:
        problem = "exit %d" % proc.returncode if counts else "no PLAY RECAP line for %s" % host
    elif counts["failed"] or counts["unreachable"]:
        problem = "failed=%d unreachable=%d" % (counts["failed"], counts["unreachable"])
    elif changed is True and not counts["changed"]:
        problem = "changed=0 on a fresh host: nothing was converged"
    elif changed is False and counts["changed"]:
        problem = "changed=%d on a converged host (expected 0)" % counts["changed"]
    if problem:
        sys.stdout.write((proc.stdout + proc.stderr)[-6000:] + "\n")
        sys.exit("tests/ee: %s: %s" % (label, problem))
    return counts


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    return proc, time.monotonic() - start


def navigator(image: str, work: Path, address: str, variables: dict) -> None:
    host = "navigator"
    # ansible-navigator refuses podman without /dev/mqueue (POSIX message queues); a container-like machine may not
    # have the directory, and its own hint is to create it.
    mqueue = Path("/dev/mqueue")
    if not mqueue.is_dir():
        if os.geteuid() != 0:
            sys.exit("tests/ee: ansible-navigator needs the directory /dev/mqueue: create it as root (mkdir /dev/mqueue)")
        mqueue.mkdir()
        print("created /dev/mqueue (ansible-navigator requires it with podman)")
    key = work / "id"
    # The EE runs as uid 1000 (ansible-builder's default user): the key must be that user's, mode 0600, for ssh.
    os.chown(key, 1000, 1000)
    inventory = work / "inventory.yml"
    host_vars = dict(variables, **connection(address), ansible_ssh_private_key_file=str(key))
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {host: host_vars}}}), encoding="utf-8")
    argv = [str(Path(sys.executable).parent / "ansible-navigator"), "run", "playbooks/site.yml", "-i", str(inventory),
            "--eei", image, "--ee", "true", "--ce", "podman", "--mode", "stdout", "--pull-policy", "never",
            # navigator mounts the inventory's directory (the key is there too) at the same path in the EE.
            "--pae", "false", "--lf", str(work / "navigator.log"),
            "--senv", "ANSIBLE_PIPELINING=True", "--senv", "ANSIBLE_FORCE_COLOR=False"]
    env = dict(PODMAN_ENV, HOME=str(work / "home"))
    (work / "home").mkdir(exist_ok=True)
    proc, elapsed = timed(argv, REPO, env)
    check("navigator: first converge", proc, host, elapsed, changed=True)
    proc, elapsed = timed(argv, REPO, env)
    check("navigator: second run", proc, host, elapsed, changed=False)


def runner(image: str, work: Path, address: str, variables: dict) -> None:
    host = "runner"
    data = work / "runner"
    for sub in ("inventory", "env", "project"):
        (data / sub).mkdir(parents=True, exist_ok=True)
    (data / "inventory" / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {host: connection(address)}}}), encoding="utf-8")
    (data / "env" / "extravars").write_text(yaml.safe_dump(variables), encoding="utf-8")
    envvars = {"ANSIBLE_PIPELINING": "True", "ANSIBLE_FORCE_COLOR": "False", "ANSIBLE_NOCOLOR": "True"}
    (data / "env" / "envvars").write_text(yaml.safe_dump(envvars), encoding="utf-8")
    shutil.copyfile(work / "id", data / "env" / "ssh_key")
    shutil.copytree(REPO / "playbooks", data / "project", dirs_exist_ok=True)
    # The private data dir is root's here, and ansible-runner hands the key to the EE as a root-owned 0600 file: the
    # EE runs as root (AWX runs rootless podman with the job's user mapped to the files' owner instead).
    argv = [str(Path(sys.executable).parent / "ansible-runner"), "run", str(data), "-p", "site.yml",
            "--container-image", image, "--process-isolation", "--process-isolation-executable", "podman",
            "--container-option=--user=0"]
    proc, elapsed = timed(argv, REPO, PODMAN_ENV)
    check("ansible-runner: first converge", proc, host, elapsed, changed=True)
    status_files = sorted((data / "artifacts").glob("*/status"))
    status = status_files[-1].read_text(encoding="utf-8").strip() if status_files else "nothing"
    if status != "successful":
        sys.exit("tests/ee: ansible-runner's artifacts say %s, not successful" % status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the EE image (ee/build.sh)")
    parser.add_argument("--keep", action="store_true", help="leave the hosts and the work directory")
    parser.add_argument("--only", choices=("navigator", "runner"), help="one of the two (both by default)")
    args = parser.parse_args()
    if not (REPO / ".cache" / "repos" / "current" / "key" / "fingerprint").is_file():
        sys.exit("tests/ee: no local test repositories in .cache/repos/current: run `make repos`")
    work = Path(tempfile.mkdtemp(prefix="gpuhost-ee-"))
    try:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "id")], check=True)
        public_key = (work / "id.pub").read_text(encoding="utf-8")
        start = time.monotonic()
        addresses = [start_host(name, public_key) for name in HOSTS]
        print("%-44s %6.1f s  %s" % ("two hosts with sshd", time.monotonic() - start, ", ".join(addresses)))
        variables = site_variables()
        if args.only in (None, "navigator"):
            navigator(args.image, work, addresses[0], variables)
        if args.only in (None, "runner"):
            runner(args.image, work, addresses[1], variables)
    finally:
        if args.keep:
            print("kept: hosts %s, work directory %s" % (", ".join(HOSTS), work))
        else:
            for name in HOSTS:
                subprocess.run(["podman", "rm", "-f", name], env=PODMAN_ENV, capture_output=True, check=False)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

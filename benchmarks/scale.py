# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What site.yml costs the controller as the number of hosts grows: 1, 5 and 10 hosts in one run. Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/scale.py [--sizes 1 5 10] [--converge 1 5] [--forks 10] [--keep]

Debian 12 systemd test containers (the ``localhost/gpuhost-debian12`` image of tests/hosts) with the site scenario's
Debian variables (molecule/site/molecule.yml), reached through the Molecule scenarios' pipelined podman connection and
its command agent (molecule/resources: the per-task cost of starting podman would otherwise be counted as the
controller's). For each size, site.yml runs in check mode on fresh hosts (the full path, predicted) and, for the
sizes in ``--converge``, for real and then once more (a full run that confirms the records) and a third time (the
converged fast path). Each run reports its wall time, the controller's CPU (user + system of ansible-playbook and
every process it waited for), the task results, and the CPU per host and per task result. Linear means the CPU per
host stays flat as the hosts grow. Needs podman, the test image (``make images``) and the test repositories
(``make repos`` or any Molecule run).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import resource
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
RESOURCES = REPO / "molecule" / "resources"
sys.path.insert(0, str(RESOURCES))
gpuhost_agent = importlib.import_module("gpuhost_agent")  # the test-only command agent, from molecule/resources

IMAGE = "localhost/gpuhost-debian12:latest"
PREFIX = "gpuhost-scale-"
PODMAN_ENV = dict(os.environ, CONTAINERS_CONF=str(REPO / "tests" / "hosts" / "containers.conf"))
COMPOSE = "install -d /srv/gpu-demo && printf 'services:\\n  app:\\n    image: busybox\\n    command: [sleep, infinity]\\n' > /srv/gpu-demo/compose.yaml"


def start_hosts(names: list[str]) -> None:
    """Fresh systemd containers with the test repositories and the command agent, as molecule's create.yml starts them."""
    remove_hosts(names)
    volumes = gpuhost_agent.prepare(names)
    repos = (REPO / ".cache" / "repos" / "current").resolve()
    for name in names:
        subprocess.run(["podman", "run", "-d", "--name", name, "--hostname", name, "--systemd=always", "-v", volumes[name],
                        "-v", "%s:/srv/gpuhost-repos:ro" % repos, IMAGE, "/sbin/init"], env=PODMAN_ENV, capture_output=True, check=True)
    for name in names:
        script = "until systemctl is-system-running --wait >/dev/null 2>&1 || [ $? -ne 1 ]; do sleep 1; done; chmod go+rx /; " + COMPOSE
        subprocess.run(["podman", "exec", name, "sh", "-c", script], env=PODMAN_ENV, capture_output=True, check=True)
    gpuhost_agent.start(names)


def remove_hosts(names: list[str]) -> None:
    subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0", *names], env=PODMAN_ENV, capture_output=True, check=False)
    gpuhost_agent.forget(names)


def inventory(work: Path, names: list[str]) -> Path:
    scenario = yaml.safe_load((REPO / "molecule" / "site" / "molecule.yml").read_text(encoding="utf-8"))
    groups = scenario["provisioner"]["inventory"]["group_vars"]
    host_vars = dict(groups["all"], **groups["debian"])
    host_vars.pop("gpuhost_summary_dir", None)
    host_vars.pop("gpuhost_fast_path", None)
    host_vars.update(ansible_connection="gpuhost_podman", ansible_python_interpreter="/usr/bin/python3")
    path = work / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": host_vars, "hosts": {name: {} for name in names}}}), encoding="utf-8")
    return path


def play(inv: Path, limit: list[str], forks: int, check: bool) -> dict:
    """One site.yml run; wall time, controller CPU (this process's waited-for children) and the task results."""
    # This checkout, as make does (the venv links it), not a copy installed under ~/.ansible/collections (as rerun.py).
    env = dict(os.environ, ANSIBLE_PIPELINING="1", ANSIBLE_FORKS=str(forks), CONTAINERS_CONF=PODMAN_ENV["CONTAINERS_CONF"],
               ANSIBLE_COLLECTIONS_PATH=os.environ.get("ANSIBLE_COLLECTIONS_PATH", sysconfig.get_paths()["purelib"]),
               ANSIBLE_CONNECTION_PLUGINS=str(RESOURCES / "plugins" / "connection"), MOLECULE_PROJECT_DIRECTORY=str(REPO),
               PYTHONPATH=str(RESOURCES), PATH="%s:%s" % (Path(sys.executable).parent, os.environ.get("PATH", "")))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), "--limit", ",".join(limit),
            str(REPO / "playbooks" / "site.yml")] + (["--check"] if check else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, cwd=REPO)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (proc.returncode, " ".join(argv), (proc.stdout + proc.stderr)[-3000:]))
    results = changed = 0
    for match in re.finditer(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)\s+skipped=(\d+)", proc.stdout):
        ok, chg, failed, skipped = (int(x) for x in match.groups())
        results += ok + failed + skipped
        changed += chg
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"hosts": len(limit), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "task_results": results, "changed": changed,
            "cpu_per_host_s": round(cpu / len(limit), 2), "cpu_per_task_ms": round(1000 * cpu / max(results, 1), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 10])
    parser.add_argument("--converge", type=int, nargs="*", default=[1, 5], help="sizes that also converge for real")
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="leave the containers running")
    args = parser.parse_args()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "gpuhost-scale"
    work.mkdir(parents=True, exist_ok=True)
    names = [PREFIX + str(i) for i in range(1, max(args.sizes) + 1)]
    rows = []
    try:
        inv = inventory(work, names)
        print("site.yml, Debian 12 containers, forks %d, strategy linear, %d CPUs, %s"
              % (args.forks, os.cpu_count() or 0, time.strftime("%Y-%m-%d %H:%M")))
        print("%-36s %5s %8s %8s %8s %8s %10s %12s" % ("run", "hosts", "wall s", "cpu s", "results", "changed", "cpu/host s", "cpu/task ms"),
              flush=True)
        for size in args.sizes:
            # Each size starts from fresh hosts.
            start_hosts(names[:size])
            runs = [("check mode, fresh hosts (full path)", True)]
            if size in args.converge:
                runs += [("first converge", False), ("second run (full path, confirms)", False), ("converged re-run (fast path)", False)]
            for label, check in runs:
                row = dict(play(inv, names[:size], args.forks, check=check), run=label)
                rows.append(row)
                print("%-36s %5d %8.1f %8.1f %8d %8d %10.2f %12.1f"
                      % (row["run"], row["hosts"], row["wall_s"], row["cpu_s"], row["task_results"], row["changed"],
                         row["cpu_per_host_s"], row["cpu_per_task_ms"]), flush=True)
        print(json.dumps(rows))
    finally:
        if not args.keep:
            remove_hosts(names)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a converged re-run of site.yml costs against ``setup``, over SSH, in one run. Prints numbers; asserts nothing.

One Debian 12 systemd test host (the ``localhost/gpuhost-debian12`` image of tests/hosts) with openssh-server, reached
the way users connect: SSH with pipelining and ControlPersist. The site scenario's Debian variables
(molecule/site/molecule.yml: forced driver, the toolkit from the local signed test repository) are used as inventory.

    .venv/bin/python benchmarks/rerun.py [--runs 3] [--keep] [--profile 15] [--first-only] [--log FILE] [--reruns N]
                                         [--first-runs N]

Steps: ``ping``, ``setup`` (median of N), ``nvidia_gpu_facts``, the first converge of site.yml, the first re-run (the
fast path since #42: the converge's records hold in its boot), the converged re-run (fast path), the re-run with
``gpuhost_fast_path=false`` (every role's full path; it removes the records, so it comes last). Each time is printed
as a multiple of ``setup``'s median. Then *raw apt*: a second fresh host from the same image gets the converged host's
apt sources, keyrings and preferences, and ``apt-get update`` plus one ``apt-get install`` of every package the first
converge installed (the dpkg list before and after it), timed inside the container; the first converge is printed as a
multiple of that too. ``--profile N`` lists the N slowest tasks of the first converge (ansible.posix.profile_tasks);
``--first-only`` skips the runs after the first converge. ``--first-runs N`` times N-1 more first converges, each on a
fresh host and followed by its own raw apt, and prints each pair, the apt transaction's own time from apt's history,
and the medians: one pair moves with the network by 0.3x. Needs podman, the test image (``make images``) and the
test repositories (``make repos`` or any Molecule run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
NAME = "gpuhost-rerun-bench"
IMAGE = "localhost/gpuhost-debian12:latest"


def run(argv: list[str], text: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, text=text, capture_output=True, **kwargs)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.monotonic()
    proc = subprocess.run(argv, text=True, capture_output=True, env=env, check=False, cwd=REPO)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (proc.returncode, " ".join(argv), (proc.stdout + proc.stderr)[-3000:]))
    return elapsed, proc.stdout


def recap(output: str) -> str:
    match = re.search(r"ok=(\d+)\s+changed=(\d+)", output)
    return "%s tasks ok, %s changed" % match.groups() if match else ""


PODMAN_ENV = dict(os.environ, CONTAINERS_CONF=str(REPO / "tests" / "hosts" / "containers.conf"))
DPKG_LIST = ["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package}\\n"]


def installed(name: str) -> set[str]:
    """The packages dpkg lists as installed in container ``name``."""
    out = run(["podman", "exec", name] + DPKG_LIST, env=PODMAN_ENV).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith("ii")}


def raw_apt(packages: list[str]) -> float:
    """apt-get update and one apt-get install of ``packages`` on a fresh host with the converged host's apt sources."""
    raw = NAME + "-raw"
    subprocess.run(["podman", "rm", "-f", raw], env=PODMAN_ENV, capture_output=True, check=False)
    repos = REPO / ".cache" / "repos" / "current"
    run(["podman", "run", "-d", "--name", raw, "--systemd=always", "-v", "%s:/srv/gpuhost-repos:ro" % repos.resolve(),
         IMAGE, "/sbin/init"], env=PODMAN_ENV)
    try:
        config = run(["podman", "exec", NAME, "tar", "-C", "/", "-c", "etc/apt/sources.list.d", "etc/apt/keyrings",
                      "etc/apt/preferences.d", "etc/apt/trusted.gpg.d", "usr/share/keyrings"], env=PODMAN_ENV, text=False).stdout
        subprocess.run(["podman", "exec", "-i", raw, "tar", "-C", "/", "-x"], input=config, env=PODMAN_ENV, check=True, capture_output=True)
        script = ("until systemctl is-system-running --wait >/dev/null 2>&1 || [ $? -ne 1 ]; do sleep 1; done; start=$(date +%s.%N); "
                  "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \"$@\" >/dev/null"
                  " && echo \"$start $(date +%s.%N)\"")
        start, end = run(["podman", "exec", raw, "bash", "-c", script, "raw"] + packages, env=PODMAN_ENV).stdout.split()[-2:]
        return float(end) - float(start)
    finally:
        subprocess.run(["podman", "rm", "-f", raw], env=PODMAN_ENV, capture_output=True, check=False)


def apt_transaction_seconds() -> float | None:
    """How long the converge host's last apt transaction ran, from apt's history (whole seconds: Start-Date to End-Date)."""
    out = subprocess.run(["podman", "exec", NAME, "cat", "/var/log/apt/history.log"], env=PODMAN_ENV, capture_output=True,
                         text=True, check=False).stdout
    dates = re.findall(r"^(Start|End)-Date: (\S+)\s+(\S+)$", out, re.M)
    if len(dates) < 2 or dates[-2][0] != "Start" or dates[-1][0] != "End":
        return None
    stamps = [time.mktime(time.strptime(day + " " + clock, "%Y-%m-%d %H:%M:%S")) for _kind, day, clock in dates[-2:]]
    return stamps[1] - stamps[0]


def start_host(work: Path, port: int) -> None:
    env = PODMAN_ENV
    subprocess.run(["podman", "rm", "-f", NAME], env=env, capture_output=True, check=False)
    for name in ("id", "id.pub"):
        (work / name).unlink(missing_ok=True)
    repos = REPO / ".cache" / "repos" / "current"
    run(["podman", "run", "-d", "--name", NAME, "--systemd=always", "-p", "127.0.0.1:%d:22" % port,
         "-v", "%s:/srv/gpuhost-repos:ro" % repos.resolve(), IMAGE, "/sbin/init"], env=env)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "id")])
    key = (work / "id.pub").read_text(encoding="utf-8")
    script = ("until systemctl is-system-running --wait >/dev/null 2>&1 || [ $? -ne 1 ]; do sleep 1; done; "
              "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null && "
              "install -d -m 0700 /root/.ssh && printf '%s' \"$KEY\" > /root/.ssh/authorized_keys && systemctl restart ssh && "
              # The site scenario's compose project (molecule/site/prepare.yml).
              "install -d /srv/gpu-demo && printf 'services:\\n  app:\\n    image: busybox\\n    command: [sleep, infinity]\\n'"
              " > /srv/gpu-demo/compose.yaml")
    run(["podman", "exec", "-e", "KEY=" + key, NAME, "bash", "-c", script], env=env)


def inventory(work: Path, port: int) -> Path:
    scenario = yaml.safe_load((REPO / "molecule" / "site" / "molecule.yml").read_text(encoding="utf-8"))
    groups = scenario["provisioner"]["inventory"]["group_vars"]
    # The shared Molecule configuration's variables first (the test hosts state their Secure Boot state), then the scenario's.
    shared = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text(encoding="utf-8"))
    host_vars = dict(shared["provisioner"]["inventory"]["group_vars"]["all"], **groups["all"])
    host_vars.update(groups["debian"])
    host_vars.pop("gpuhost_summary_dir", None)
    host_vars.pop("gpuhost_fast_path", None)
    host_vars.pop("gpuhost_converged_full_run", None)  # Molecule's idempotence setting: a user's runs take the fast path
    host_vars.update(ansible_host="127.0.0.1", ansible_port=port, ansible_user="root",
                     ansible_ssh_private_key_file=str(work / "id"), ansible_python_interpreter="/usr/bin/python3",
                     ansible_ssh_common_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                                             "-o ControlMaster=auto -o ControlPersist=60s")
    path = work / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"bench": host_vars}}}), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of ping, setup and nvidia_gpu_facts for their medians")
    parser.add_argument("--port", type=int, default=22922)
    parser.add_argument("--keep", action="store_true", help="leave the container running, and its inventory")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="list the N slowest tasks of the first converge")
    parser.add_argument("--first-only", action="store_true", help="only the first converge, then raw apt")
    parser.add_argument("--log", type=Path, metavar="FILE", help="write the first converge's whole output there")
    parser.add_argument("--reruns", type=int, default=1, metavar="N", help="time N converged re-runs (the fast path)")
    parser.add_argument("--first-runs", type=int, default=1, metavar="N",
                        help="time N first converges, each on a fresh host, each followed by its raw apt; print each pair and the medians")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpuhost-rerun-"))
    bin_dir = Path(sys.executable).parent
    # This checkout, as make does (the venv links it): not a copy installed under ~/.ansible/collections, which wins otherwise.
    env = dict(os.environ, ANSIBLE_PIPELINING="1", ANSIBLE_HOST_KEY_CHECKING="0", MOLECULE_PROJECT_DIRECTORY=str(REPO),
               ANSIBLE_COLLECTIONS_PATH=os.environ.get("ANSIBLE_COLLECTIONS_PATH", sysconfig.get_paths()["purelib"]),
               PATH="%s:%s" % (bin_dir, os.environ.get("PATH", "")))
    try:
        start_host(work, args.port)
        inv = str(inventory(work, args.port))
        adhoc = [str(bin_dir / "ansible"), "-i", inv, "bench", "-m"]
        play = [str(bin_dir / "ansible-playbook"), "-i", inv, str(REPO / "playbooks" / "site.yml")]
        timed(adhoc + ["ansible.builtin.ping"], env)  # opens the SSH master connection
        # Each ad-hoc module the median of --runs, alternated (one slow call would otherwise decide a ratio).
        adhoc_times: dict[str, list[float]] = {"ansible.builtin.ping": [], "ansible.builtin.setup": [], "gpuhost.nvidia.nvidia_gpu_facts": []}
        for _run in range(args.runs):
            for module, times in adhoc_times.items():
                times.append(timed(adhoc + [module], env)[0])
        setup = statistics.median(adhoc_times["ansible.builtin.setup"])
        ping = statistics.median(adhoc_times["ansible.builtin.ping"])
        facts = statistics.median(adhoc_times["gpuhost.nvidia.nvidia_gpu_facts"])
        rows = [("ping (median of %d)" % args.runs, ping, ""), ("setup (median of %d)" % args.runs, setup, ""),
                ("nvidia_gpu_facts (median of %d)" % args.runs, facts, "%.1fx ping" % (facts / ping))]
        before = installed(NAME)
        new_packages: list[str] = []
        profile = ""
        steps = [("first converge of site.yml", []), ("first re-run after the converge", [])]
        steps += [("converged re-run (fast path)" + (" %d" % (number + 1) if args.reruns > 1 else ""), []) for number in range(args.reruns)]
        # Last: with the fast path off the roles remove their records (4 changed).
        steps += [("re-run, gpuhost_fast_path=false (full path)", ["-e", "gpuhost_fast_path=false"])]
        for label, extra in steps[:1] if args.first_only else steps:
            run_env = env
            if args.profile and not new_packages:
                run_env = dict(env, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT=str(args.profile))
            elapsed, out = timed(play + extra, run_env)
            rows.append((label, elapsed, recap(out)))
            if not new_packages:
                new_packages = sorted(installed(NAME) - before)
                profile = out[out.rfind("PLAY RECAP"):]
                if args.log:
                    args.log.write_text(out, encoding="utf-8")
        first = rows[3][1]
        apt_time = raw_apt(new_packages)
        rows.append(("raw apt-get update + install (%d packages)" % len(new_packages), apt_time,
                     "first converge = %.1fx raw apt" % (first / apt_time)))
        # More first converges, each on a fresh host and followed by its own raw apt (the network moves both).
        pairs = [(first, apt_time, None)]
        for _round in range(args.first_runs - 1):
            start_host(work, args.port)
            timed(adhoc + ["ansible.builtin.ping"], env)
            fresh = installed(NAME)
            converge = timed(play, env)[0]
            transaction = apt_transaction_seconds()
            pairs.append((converge, raw_apt(sorted(installed(NAME) - fresh)), transaction))
        if args.first_runs > 1:
            for number, (converge, raw, transaction) in enumerate(pairs, 1):
                rows.append(("first converge %d / its raw apt" % number, converge, "%.1f s raw apt, %.1fx%s" % (
                    raw, converge / raw, "" if transaction is None else "; its apt transaction %.0f s (apt history)" % transaction)))
            converge_median = statistics.median(pair[0] for pair in pairs)
            raw_median = statistics.median(pair[1] for pair in pairs)
            rows.append(("first converge, median of %d" % len(pairs), converge_median, "raw apt median %.1f s: %.1fx; ratios %s" % (
                raw_median, converge_median / raw_median, ", ".join("%.1f" % (pair[0] / pair[1]) for pair in pairs))))
        print("one Debian 12 systemd host over SSH (pipelining, ControlPersist), %s" % time.strftime("%Y-%m-%d %H:%M"))
        for label, elapsed, note in rows:
            print("%-46s %6.1f s  %5.1fx setup  %s" % (label, elapsed, elapsed / setup, note))
        print(json.dumps({label: round(elapsed, 2) for label, elapsed, _note in rows}))
        if args.profile:
            print("the %d slowest tasks of the first converge (ansible.posix.profile_tasks):" % args.profile)
            print("\n".join(line for line in profile.splitlines() if re.search(r"[0-9.]+s$", line) and "PLAY RECAP" not in line))
    finally:
        if args.keep:
            print("kept: the host %s, its inventory %s" % (NAME, work / "inventory.yml"))
        else:
            subprocess.run(["podman", "rm", "-f", NAME], capture_output=True, check=False, env=PODMAN_ENV)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

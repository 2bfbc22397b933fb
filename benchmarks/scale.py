# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What site.yml costs the controller as the number of hosts grows (10, 50, 100 hosts in one run). Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/scale.py [--sizes 10 50 100] [--check 10] [--converge 3] [--forks 10]
                                         [--profile 100] [--seed-image IMAGE] [--keep] [--json FILE]

Debian 12 systemd test containers (the ``localhost/gpuhost-debian12`` image of tests/hosts) with the site scenario's
Debian variables (.config/molecule/config.yml and molecule/site/molecule.yml), reached through the Molecule scenarios'
pipelined podman connection and its command agent (molecule/resources: the per-task cost of starting podman would
otherwise be counted as the controller's). All containers are named ``gpuhost-scale-*`` and removed at the end.

1. **Seed**: one fresh host gets site.yml's first converge, the confirming second run (a full run: the first
   converge's records are not confirmed, docs/design-notes.md) and a converged re-run; then it is committed to an image
   (``--seed-image`` reuses one a previous ``--keep`` left).
2. **Converged sizes** (``--sizes``): as many hosts as the largest size are started from the seed image (a copy of a
   converged host: same records, same packages); for each size ``ansible -m setup`` over those hosts (the floor) and
   the converged re-run of site.yml, which must report 0 changed on every host, with the seed's task results per host
   (else the copy did not take the fast path and the script stops). Container memory (PSS and RSS of every process in
   each container's PID namespace) and the machine's MemAvailable are read with the hosts idle and after the runs.
   ``--profile N`` re-runs size N once more under py-spy (``--subprocesses``) and prints where the controller's samples
   fall.
3. **Fresh sizes**: ``--check`` sizes run site.yml in check mode on fresh hosts (the whole path, predicted);
   ``--converge`` sizes run the first converge, the second run and the converged re-run on fresh hosts (the Debian
   packages come from the network each time).

Each run reports its wall time, the controller's CPU (user + system of ansible-playbook and every process it waited
for, read by a wrapper process around each run, so one run's numbers are its own), the controller's peak RSS (the
largest of those processes), the machine's CPU busy time over the run (hosts, controller and anyone else), the load
average at its start, the task results and changes, and the CPU per host and per task result. Linear means the CPU
per host stays flat as the hosts grow. Needs podman, the test image (``make images``), the test repositories (``make
repos``), and for ``--profile`` py-spy (PyPI). Each systemd container holds about 5 inotify instances, all under the
one root user: the script stops early when ``fs.inotify.max_user_instances`` is too low for the hosts it would start.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
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
INOTIFY_PER_HOST = 6  # a systemd test container holds 5 (PID 1, journald, logind, dbus); one spare

# Runs one command and writes its own RUSAGE_CHILDREN (the command and everything it waited for) as JSON: the
# controller's CPU and peak RSS of one run, whatever ran before it in this process. It also reads the command's own
# CPU (its main process alone, not the task workers it forked) from /proc once it has exited and before it is reaped:
# ansible-playbook's strategy runs in that one process, which can use one core at most.
WRAPPER = r"""
import json, os, resource, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
with open("/proc/%d/stat" % proc.pid, encoding="ascii") as stat:
    fields = stat.read().rsplit(")", 1)[1].split()
tick = os.sysconf("SC_CLK_TCK")
main = (int(fields[11]) + int(fields[12])) / tick
proc.wait()
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump({"user": usage.ru_utime, "sys": usage.ru_stime, "maxrss_kib": usage.ru_maxrss, "main_s": main}, out)
sys.exit(proc.returncode)
"""


def podman(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *argv], env=PODMAN_ENV, capture_output=True, text=True, check=check)


def check_inotify(hosts: int) -> None:
    """Stop early, naming the fix, when the hosts would exhaust root's inotify instances (systemd fails to start)."""
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text(encoding="ascii"))
    in_use = 0
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            in_use += sum(1 for fd in fd_dir.iterdir() if os.readlink(fd) == "anon_inode:inotify")
        except OSError:
            continue
    need = in_use + INOTIFY_PER_HOST * hosts
    if need > limit:
        sys.exit("fs.inotify.max_user_instances is %d; %d hosts need about %d more than the %d in use: "
                 "run `sysctl -w fs.inotify.max_user_instances=%d` (root) and start again" % (limit, hosts, INOTIFY_PER_HOST * hosts, in_use, need + 64))


def start_hosts(names: list[str], image: str = IMAGE) -> None:
    """Containers with the test repositories and the command agent, as molecule's create.yml starts them."""
    remove_hosts(names)
    volumes = gpuhost_agent.prepare(names)
    repos = (REPO / ".cache" / "repos" / "current").resolve()
    for name in names:
        podman("run", "-d", "--name", name, "--hostname", name, "--systemd=always", "-v", volumes[name],
               "-v", "%s:/srv/gpuhost-repos:ro" % repos, image, "/sbin/init")
    for name in names:
        # A converged copy boots "degraded": nvidia-persistenced fails without /dev/nvidia* (docs/design.md's test tiers).
        script = ("for i in $(seq 120); do case $(systemctl is-system-running --wait 2>/dev/null) in running|degraded) break;; esac;"
                  " sleep 1; done; chmod go+rx /; " + COMPOSE)
        podman("exec", name, "sh", "-c", script)
    gpuhost_agent.start(names)


def remove_hosts(names: list[str]) -> None:
    for chunk in range(0, len(names), 50):
        podman("rm", "--force", "--ignore", "--time", "0", *names[chunk:chunk + 50], check=False)
    gpuhost_agent.forget(names)


def inventory(work: Path, names: list[str]) -> Path:
    shared = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text(encoding="utf-8"))
    scenario = yaml.safe_load((REPO / "molecule" / "site" / "molecule.yml").read_text(encoding="utf-8"))
    groups = scenario["provisioner"]["inventory"]["group_vars"]
    # The shared Molecule configuration's variables (the Secure Boot state a container cannot read), then the site
    # scenario's for every host and for Debian, as Molecule merges them.
    host_vars = dict(shared["provisioner"]["inventory"]["group_vars"]["all"])
    host_vars.update(groups["all"])
    host_vars.update(groups["debian"])
    host_vars.pop("gpuhost_summary_dir", None)
    host_vars.pop("gpuhost_fast_path", None)
    # Molecule's idempotence setting (every role's full path): a user's runs, and these, take the fast path.
    host_vars.pop("gpuhost_converged_full_run", None)
    host_vars.update(ansible_connection="gpuhost_podman", ansible_python_interpreter="/usr/bin/python3")
    path = work / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": host_vars, "hosts": {name: {} for name in names}}}), encoding="utf-8")
    return path


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (every core, every process) since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text(encoding="ascii").splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def controller_env(forks: int, strategy: str = "linear", fact_cache: str = "") -> dict[str, str]:
    # This checkout, as make does (the venv links it), not a copy installed under ~/.ansible/collections (as rerun.py).
    cache = {"ANSIBLE_CACHE_PLUGIN": "ansible.builtin.jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION": fact_cache} if fact_cache else {}
    return dict(os.environ, **cache, ANSIBLE_PIPELINING="1", ANSIBLE_FORKS=str(forks), ANSIBLE_STRATEGY=strategy, CONTAINERS_CONF=PODMAN_ENV["CONTAINERS_CONF"],
                ANSIBLE_COLLECTIONS_PATH=os.environ.get("ANSIBLE_COLLECTIONS_PATH", sysconfig.get_paths()["purelib"]),
                ANSIBLE_CONNECTION_PLUGINS=str(RESOURCES / "plugins" / "connection"), MOLECULE_PROJECT_DIRECTORY=str(REPO),
                PYTHONPATH=str(RESOURCES), PATH="%s:%s" % (Path(sys.executable).parent, os.environ.get("PATH", "")))


def timed(argv: list[str], env: dict[str, str], work: Path, prefix: list[str] | None = None) -> tuple[dict, str]:
    """Run ``argv`` through the rusage wrapper; its wall time, controller CPU, peak RSS, machine CPU and output."""
    usage_file = work / "usage.json"
    usage_file.unlink(missing_ok=True)
    load = os.getloadavg()[0]
    busy = machine_busy()
    start = time.monotonic()
    proc = subprocess.run((prefix or []) + [sys.executable, "-c", WRAPPER, str(usage_file)] + argv, env=env,
                          capture_output=True, text=True, check=False, cwd=REPO)
    wall = time.monotonic() - start
    busy = machine_busy() - busy
    if proc.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (proc.returncode, " ".join(argv), (proc.stdout + proc.stderr)[-3000:]))
    usage = json.loads(usage_file.read_text(encoding="utf-8"))
    return {"wall_s": round(wall, 1), "cpu_s": round(usage["user"] + usage["sys"], 1), "main_cpu_s": round(usage["main_s"], 1),
            "peak_rss_mib": round(usage["maxrss_kib"] / 1024),
            "machine_cpu_s": round(busy, 1), "load1": round(load, 1)}, proc.stdout


def recap(output: str) -> dict[str, dict[str, int]]:
    hosts = {}
    for match in re.finditer(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", output, re.M):
        ok, changed, unreachable, failed, skipped = (int(x) for x in match.groups()[1:])
        hosts[match.group(1)] = {"results": ok + failed + skipped, "changed": changed, "unreachable": unreachable}
    return hosts


def play(inv: Path, limit: list[str], forks: int, work: Path, check: bool = False, prefix: list[str] | None = None,
         strategy: str = "linear", fact_cache: str = "") -> dict:
    """One site.yml run over ``limit`` (``strategy`` for every play that does not name its own)."""
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), "--limit", ",".join(limit),
            str(REPO / "playbooks" / "site.yml")] + (["--check"] if check else [])
    row, out = timed(argv, controller_env(forks, strategy, fact_cache), work, prefix)
    hosts = recap(out)
    if sorted(hosts) != sorted(limit):
        sys.exit("the recap names %d hosts, not the %d of --limit:\n%s" % (len(hosts), len(limit), out[-3000:]))
    row.update(hosts=len(limit), task_results=sum(h["results"] for h in hosts.values()),
               changed=sum(h["changed"] for h in hosts.values()), per_host=hosts)
    return row


def setup(inv: Path, limit: list[str], forks: int, work: Path) -> dict:
    """``ansible -m ansible.builtin.setup`` over ``limit``: the floor, one module call per host."""
    argv = [str(Path(sys.executable).parent / "ansible"), "-i", str(inv), ",".join(limit), "-m", "ansible.builtin.setup"]
    row, out = timed(argv, controller_env(forks), work)
    succeeded = len(re.findall(r"^\S+ \| SUCCESS", out, re.M))
    if succeeded != len(limit):
        sys.exit("setup succeeded on %d of %d hosts:\n%s" % (succeeded, len(limit), out[-3000:]))
    row.update(hosts=len(limit), task_results=len(limit), changed=0)
    return row


def memory(names: list[str]) -> dict:
    """PSS and RSS of every process in each container's PID namespace (MiB): the host's own memory cost."""
    namespaces = {}
    for name in names:
        pid = podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
        namespaces[os.readlink("/proc/%s/ns/pid" % pid)] = name
    pss = collections.Counter()
    rss = collections.Counter()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            name = namespaces.get(os.readlink(proc / "ns" / "pid"))
            if name is None:
                continue
            rollup = (proc / "smaps_rollup").read_text(encoding="ascii")
        except OSError:
            continue
        for key, counter in (("Pss", pss), ("Rss", rss)):
            match = re.search(r"^%s:\s+(\d+) kB" % key, rollup, re.M)
            counter[name] += int(match.group(1)) if match else 0
    per_host_pss = sorted(pss[name] / 1024 for name in names)
    per_host_rss = sorted(rss[name] / 1024 for name in names)
    return {"hosts": len(names), "pss_mib_median": round(per_host_pss[len(names) // 2], 1), "pss_mib_max": round(per_host_pss[-1], 1),
            "pss_mib_total": round(sum(per_host_pss)), "rss_mib_median": round(per_host_rss[len(names) // 2], 1)}


def mem_available_mib() -> int:
    match = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(encoding="ascii"), re.M)
    return int(match.group(1)) // 1024 if match else -1


# Leaf frames that block (a queue read, the strategy's poll loop, a socket read): py-spy's idle detection does not see
# them as idle with --nonblocking.
WAITING = ("_wait_on_pending_results", "Connection._recv", "SimpleQueue.get", "SocketIO.readinto", "Popen._try_wait",
           "SemLock.__enter__", "Condition.wait", "Event.wait", "select (", "poll (", "time.sleep")


# This collection's plugins, as py-spy names their frames: "function (file.py:line)", the bare file name for a file the
# collection loader imported.
OURS = {kind: tuple("(%s:" % path.name for path in (REPO / "plugins" / kind).glob("*.py")) for kind in ("action", "filter")}


def profile_summary(raw: Path, top: int = 15) -> list[str]:
    """Where py-spy's samples fall: inclusive shares of named frames (a stack counts once per row) and the top own frames."""
    workers = "WorkerProcess._run"
    rows = [
        ("main process (strategy, results, callbacks)", lambda st: workers not in st),
        ("  starting workers (fork)", lambda st: workers not in st and "WorkerProcess.start" in st),
        ("  processing results", lambda st: workers not in st and "_process_pending_results" in st),
        ("  callbacks", lambda st: workers not in st and "plugins/callback/" in st),
        ("  templating (conditionals, loops, vars)", lambda st: workers not in st and ("_templating" in st or "jinja2/" in st)),
        ("  the variable manager (get_vars)", lambda st: workers not in st and "vars/manager.py" in st),
        ("worker processes (one per task and host)", lambda st: workers in st),
        ("  module payload build (AnsiballZ)", lambda st: workers in st and "module_common.py" in st),
        ("  gpuhost.nvidia action plugins", lambda st: workers in st and any(p in st for p in OURS["action"])),
        ("  gpuhost.nvidia filters", lambda st: any(p in st for p in OURS["filter"])),
        ("  templating (task arguments)", lambda st: workers in st and ("_templating" in st or "jinja2/" in st)),
        ("  the variable manager (get_vars) in workers", lambda st: workers in st and "vars/manager.py" in st),
        ("  connection (agent calls)", lambda st: workers in st and ("plugins/connection/" in st or "(gpuhost_podman.py:" in st)),
        ("  imports (collection loader, bytecode)", lambda st: workers in st and ("_collection_finder" in st or "importlib._bootstrap" in st)),
    ]
    counts = collections.Counter()
    own = collections.Counter()
    total = waiting = 0
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _space, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples = int(count)
        leaf = stack.rsplit(";", 1)[-1]
        if any(wait in leaf for wait in WAITING):  # blocked, though py-spy's idle detection counted it
            waiting += samples
            continue
        total += samples
        own[leaf] += samples
        for label, test in rows:
            if test(stack):
                counts[label] += samples
    lines = ["py-spy: %d samples in ansible-playbook and its workers, less %d in waits py-spy took for work (queue reads, the"
             " strategy's poll sleep); shares are inclusive" % (total, waiting)]
    lines += ["  %5.1f%%  %s" % (100 * counts[label] / max(total, 1), label) for label, _test in rows]
    lines.append("top own frames:")
    lines += ["  %5.1f%%  %s" % (100 * n / max(total, 1), frame[:150]) for frame, n in own.most_common(top)]
    return lines


COLUMNS = "%-44s %5s %7s %7s %7s %8s %7s %7s %7s %10s %11s %5s"


def print_row(label: str, row: dict) -> None:
    print(COLUMNS % (label, row["hosts"], "%.1f" % row["wall_s"], "%.1f" % row["cpu_s"], "%.1f" % row["main_cpu_s"], "%.1f" % row["machine_cpu_s"],
                     row["task_results"], row["changed"], row["peak_rss_mib"], "%.2f" % (row["cpu_s"] / row["hosts"]),
                     "%.1f" % (1000 * row["cpu_s"] / max(row["task_results"], 1)), "%.1f" % row["load1"]), flush=True)


def main() -> None:  # noqa: C901 - one measurement, in order
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10, 50, 100], help="converged sizes: setup and the re-run")
    parser.add_argument("--check", type=int, nargs="*", default=[10], help="sizes that run check mode on fresh hosts")
    parser.add_argument("--converge", type=int, nargs="*", default=[], help="sizes that converge fresh hosts (network)")
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="one more re-run of N converged hosts under py-spy")
    parser.add_argument("--variant", action="append", default=[], metavar="HOSTS:FORKS:STRATEGY[:jsonfile]",
                        help="after the sizes, the converged re-run of HOSTS hosts with these forks and strategy, and with"
                             " :jsonfile a jsonfile fact cache (repeatable); a new forks value also times setup")
    parser.add_argument("--seed-image", help="a converged image a previous --keep left (skips the seed converge)")
    parser.add_argument("--keep", action="store_true", help="keep the seed image (its name is printed)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every row there")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpuhost-scale-"))
    most = max(args.sizes + args.check + args.converge + [1])
    check_inotify(most)
    names = [PREFIX + str(i) for i in range(1, most + 1)]
    seed_name = PREFIX + "seed"
    seed_image = args.seed_image or "localhost/gpuhost-scale-converged:%d" % os.getpid()
    rows: list[dict] = []
    inv = inventory(work, names + [seed_name])
    print("site.yml, Debian 12 containers, forks %d, strategy linear, %d CPUs, %.0f GiB, %s UTC; load %s"
          % (args.forks, os.cpu_count() or 0, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
             time.strftime("%Y-%m-%d %H:%M", time.gmtime()), " ".join("%.1f" % x for x in os.getloadavg())))
    print(COLUMNS % ("run", "hosts", "wall s", "cpu s", "main s", "machine s", "results", "changed", "rss MiB", "cpu/host s", "cpu/task ms", "load"),
          flush=True)

    def record(label: str, row: dict) -> dict:
        row = dict(row, run=label)
        row.pop("per_host", None)
        rows.append(row)
        print_row(label, row)
        if args.json:  # after every row: a run stopped half-way keeps what it measured
            args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        return row

    try:
        if not args.seed_image:
            start_hosts([seed_name])
            record("seed: first converge", play(inv, [seed_name], args.forks, work))
            record("seed: second run (full path, confirms)", play(inv, [seed_name], args.forks, work))
            record("seed: setup", setup(inv, [seed_name], args.forks, work))
            record("seed: converged re-run (fast path)", play(inv, [seed_name], args.forks, work))
            # The agent's socket lives in a controller directory, not in the image; /run is a tmpfs.
            podman("commit", "--pause", seed_name, seed_image)
            remove_hosts([seed_name])
        if args.sizes:
            start_hosts([seed_name], seed_image)
            reference = play(inv, [seed_name], args.forks, work)["per_host"][seed_name]
            remove_hosts([seed_name])
            available = mem_available_mib()
            hosts = names[:max(args.sizes)]
            start_hosts(hosts, seed_image)
            time.sleep(10)
            idle = memory(hosts)
            idle["mem_available_drop_mib"] = available - mem_available_mib()
            print("memory, %d converged hosts idle: PSS per host median %.1f MiB (max %.1f, total %d), RSS median %.1f MiB;"
                  " MemAvailable fell by %d MiB when they started"
                  % (idle["hosts"], idle["pss_mib_median"], idle["pss_mib_max"], idle["pss_mib_total"], idle["rss_mib_median"],
                     idle["mem_available_drop_mib"]), flush=True)
            rows.append(dict(idle, run="memory, idle"))
            for size in args.sizes:  # in the order given: the sizes that matter most first, on a machine that may run out of time
                record("setup (the floor)", setup(inv, names[:size], args.forks, work))
                row = play(inv, names[:size], args.forks, work)
                wrong = {name: host for name, host in row["per_host"].items() if host != reference}
                if wrong:
                    sys.exit("the copies of the converged host did not all take the fast path (the seed's re-run: %s): %s"
                             % (reference, dict(list(wrong.items())[:5])))
                record("converged re-run (fast path)", row)
            for variant in args.variant:
                size, forks, strategy, cache = (variant.split(":") + [""])[:4]
                if int(forks) != args.forks:
                    record("setup, forks %s" % forks, setup(inv, names[:int(size)], int(forks), work))
                row = play(inv, names[:int(size)], int(forks), work, strategy=strategy, fact_cache=str(work / "facts") if cache else "")
                if any(host != reference for host in row["per_host"].values()):
                    sys.exit("a converged re-run (%s) did not take the fast path everywhere: %s" % (variant, row["per_host"]))
                record("re-run, forks %s, %s%s" % (forks, strategy, ", jsonfile cache" if cache else ""), row)
            busy = memory(hosts)
            print("memory, %d hosts after the runs: PSS per host median %.1f MiB (max %.1f, total %d)"
                  % (busy["hosts"], busy["pss_mib_median"], busy["pss_mib_max"], busy["pss_mib_total"]), flush=True)
            rows.append(dict(busy, run="memory, after the runs"))
            if args.profile:
                raw = work / "profile.txt"
                spy = [str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses", "--nonblocking", "--format", "raw",
                       "--rate", "50", "--output", str(raw), "--"]
                record("converged re-run under py-spy", play(inv, names[:args.profile], args.forks, work, prefix=spy))
                print("\n".join(profile_summary(raw)), flush=True)
            remove_hosts(hosts)
        for size in sorted(args.check):
            start_hosts(names[:size])
            record("check mode, fresh hosts (full path)", play(inv, names[:size], args.forks, work, check=True))
            remove_hosts(names[:size])
        for size in sorted(args.converge):
            start_hosts(names[:size])
            record("first converge, fresh hosts", play(inv, names[:size], args.forks, work))
            record("second run (full path, confirms)", play(inv, names[:size], args.forks, work))
            record("converged re-run (fast path)", play(inv, names[:size], args.forks, work))
            remove_hosts(names[:size])
        print(json.dumps(rows))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    finally:
        remove_hosts(names + [seed_name])
        if not args.keep and not args.seed_image:
            podman("rmi", "--ignore", seed_image, check=False)
        elif not args.seed_image:
            print("kept the seed image %s (--seed-image)" % seed_image)


if __name__ == "__main__":
    main()

"""A dry computation of the Molecule tier's lanes: when each scenario would start and end, from a tier log's seconds.

    python3 benchmarks/ci_lanes.py LOG [--lanes 2] [--set NAME=SECONDS ...] [--order a,b,c]

LOG is a Molecule tier log (tests/output/tiers/molecule.log, or a rehearsal's inside/tiers/molecule.log) with
tests/molecule/run.sh's summary lines ``molecule NAME PASS 1219 s ...``. The scenarios are started as run.sh starts
them: in its LONGEST_FIRST order (or --order), the next one as soon as one of the --lanes running ones ends (wait -n).
--set replaces a scenario's seconds, to model a change before making it. Prints each lane's timeline and the end of
the last scenario for run.sh's order, and the best order over every permutation of the scenarios.

It assumes a scenario takes as long as it took in the log whatever runs beside it, which is not true on 2 busy cores:
compare orders with it, not machines.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"^molecule (\S+) +(?:PASS|FAIL) +(\d+) s ")


def scenario_seconds(log: Path) -> dict[str, int]:
    found = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if match := SUMMARY.match(line):
            found[match.group(1)] = int(match.group(2))
    return found


def run_sh_order() -> list[str]:
    text = (REPO / "tests" / "molecule" / "run.sh").read_text(encoding="utf-8")
    match = re.search(r"^LONGEST_FIRST=\(([^)]*)\)", text, re.M)
    if not match:
        raise SystemExit("no LONGEST_FIRST=(...) in tests/molecule/run.sh")
    return match.group(1).split()


def schedule(order: list[str], seconds: dict[str, int], lanes: int) -> tuple[int, list[list[tuple[str, int, int]]]]:
    """run.sh's queue: start in order; each next scenario takes the lane that frees first. (end, per-lane timelines)"""
    free = [(0, lane) for lane in range(lanes)]
    timelines: list[list[tuple[str, int, int]]] = [[] for lane in range(lanes)]
    for name in order:
        start, lane = heapq.heappop(free)
        timelines[lane].append((name, start, start + seconds[name]))
        heapq.heappush(free, (start + seconds[name], lane))
    return max(end for end, _lane in free), timelines


def show(title: str, order: list[str], seconds: dict[str, int], lanes: int) -> int:
    end, timelines = schedule(order, seconds, lanes)
    print(f"{title}: {' '.join(order)}  ->  the last scenario ends at {end} s")
    for lane, timeline in enumerate(timelines, 1):
        print(f"  lane {lane}: " + ", ".join(f"{name} {start}-{stop}" for name, start, stop in timeline))
    return end


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=SECONDS")
    parser.add_argument("--order", help="comma-separated scenarios (default: run.sh's LONGEST_FIRST)")
    args = parser.parse_args(argv)
    seconds = scenario_seconds(args.log)
    if not seconds:
        print(f"no 'molecule NAME PASS N s' lines in {args.log}", file=sys.stderr)
        return 2
    for item in args.set:
        name, _sep, value = item.partition("=")
        if name not in seconds or not value.isdigit():
            print(f"--set {item}: want NAME=SECONDS for one of {', '.join(sorted(seconds))}", file=sys.stderr)
            return 2
        seconds[name] = int(value)
    print("seconds: " + ", ".join(f"{name} {secs}" for name, secs in sorted(seconds.items(), key=lambda kv: -kv[1])))
    floor = max(*seconds.values(), -(-sum(seconds.values()) // args.lanes))
    print(f"sum {sum(seconds.values())} s over {args.lanes} lanes: no order ends before {floor} s")
    base = args.order.split(",") if args.order else [n for n in run_sh_order() if n in seconds]
    base += sorted(n for n in seconds if n not in base)
    show("run.sh's order" if not args.order else "--order", base, seconds, args.lanes)
    # Of the orders that end first, the one that starts the longest scenarios earliest (the most robust to a
    # scenario that takes longer than in the log).
    best = min(itertools.permutations(seconds),
               key=lambda order: (schedule(list(order), seconds, args.lanes)[0], [-seconds[name] for name in order]))
    show("best order", list(best), seconds, args.lanes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

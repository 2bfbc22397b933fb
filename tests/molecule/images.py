"""Print the test-host images (tests/hosts/build.sh names) that the given Molecule scenarios run on.

    python3 tests/molecule/images.py [SCENARIO ...]     (none: the scenarios tests/molecule/run.sh runs without a name)

`make molecule ROLE=x` builds only these, so a run of one scenario (or a rehearsal of a few) does not build the
images of the others. Without a name, as in `make test`, the scenarios of tests/molecule/on-demand.txt are left out
as run.sh leaves them out (GPUHOST_MOLECULE_ALL=1 keeps them): CI does not build an image only they run on (rocky10,
about two minutes on a fresh machine). An image that is not a gpuhost test host (a scenario's own) is left to its
scenario.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
IMAGE = re.compile(r"^localhost/gpuhost-([a-z0-9]+):latest$")


def platforms(scenario: Path) -> list[dict]:
    found = (yaml.safe_load((scenario / "molecule.yml").read_text(encoding="utf-8")) or {}).get("platforms")
    if found is None:  # the shared default platforms
        found = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text(encoding="utf-8"))["platforms"]
    return found


def on_demand() -> set[str]:
    """The scenarios run.sh leaves out when it is given no name (none with GPUHOST_MOLECULE_ALL=1)."""
    listing = REPO / "tests" / "molecule" / "on-demand.txt"
    if os.environ.get("GPUHOST_MOLECULE_ALL") == "1" or not listing.is_file():
        return set()
    return {line.split()[0] for line in listing.read_text(encoding="utf-8").splitlines() if line.split() and not line.split()[0].startswith("#")}


def main(names: list[str]) -> int:
    scenarios = [REPO / "molecule" / name for name in names] or [
        p.parent for p in sorted((REPO / "molecule").glob("*/molecule.yml")) if p.parent.name not in on_demand()]
    missing = [s.name for s in scenarios if not (s / "molecule.yml").is_file()]
    if missing:
        print(f"no Molecule scenario named {', '.join(missing)}", file=sys.stderr)
        return 2
    images = {m.group(1) for s in scenarios for p in platforms(s) if (m := IMAGE.match(str(p.get("image", ""))))}
    print(" ".join(sorted(images)))
    return 0


if __name__ == "__main__":
    sys.exit(main(" ".join(sys.argv[1:]).split()))

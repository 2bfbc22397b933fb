"""Print the test-host images (tests/hosts/build.sh names) that the given Molecule scenarios run on.

    python3 tests/molecule/images.py [SCENARIO ...]     (none: every scenario under molecule/)

`make molecule ROLE=x` builds only these, so a run of one scenario (or a rehearsal of a few) does not build the
images of the others. An image that is not a gpuhost test host (a scenario's own) is left to its scenario.
"""

from __future__ import annotations

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


def main(names: list[str]) -> int:
    scenarios = [REPO / "molecule" / name for name in names] or sorted(p.parent for p in (REPO / "molecule").glob("*/molecule.yml"))
    missing = [s.name for s in scenarios if not (s / "molecule.yml").is_file()]
    if missing:
        print(f"no Molecule scenario named {', '.join(missing)}", file=sys.stderr)
        return 2
    images = {m.group(1) for s in scenarios for p in platforms(s) if (m := IMAGE.match(str(p.get("image", ""))))}
    print(" ".join(sorted(images)))
    return 0


if __name__ == "__main__":
    sys.exit(main(" ".join(sys.argv[1:]).split()))

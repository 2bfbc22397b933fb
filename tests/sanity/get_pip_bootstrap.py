"""Stand-in for ansible-test's pip bootstrap script (get-pip.py).

ansible-test creates each sanity venv without pip and then downloads a get-pip.py
from a host this project's CI cannot reach. `make sanity` installs this file in
ansible-test's cache under the name it looks for. It does the same job with what is
available offline-first: Python's bundled ``ensurepip``, then ``pip install`` of the
exact pip version ansible-test asked for (from the configured package index).
"""

from __future__ import annotations

import subprocess
import sys

# get-pip.py options that plain pip does not know.
_GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main() -> None:
    args = [arg for arg in sys.argv[1:] if arg not in _GET_PIP_ONLY]
    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *args], check=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""What opening the apt cache costs with the collection's preferences files, against none and against a glob pin.

Run it with the system Python (python3-apt) on a Debian host the roles converged, for example a Molecule `site` host:
``podman exec -i gpuhost-debian12-site python3 - < benchmarks/apt_pin.py``. It opens the cache as the apt module does
(python-apt: the cache, then the depcache, which reads the preferences), in a fresh process each time, alternating the
three preference sets, and prints the medians in seconds. Numbers from a loaded machine say little: compare on one
idle machine.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

# The driver pin of 2b47ec4: 13 globs, which apt matches against every package whenever it opens its cache.
OLD_GLOB_PIN = ("Explanation: the driver pin of 2b47ec4\n"
                "Package: nvidia-* libnvidia-* libcuda1* libcudadebugger1* libnvcuvid1* libnvoptix1* libgl1-nvidia-* "
                "libegl-nvidia* libgles-nvidia* libglx-nvidia* xserver-xorg-video-nvidia* firmware-nvidia-gsp* "
                "cuda-drivers*\nPin: version 535.*\nPin-Priority: 1001\n")
CACHE_OPEN = """
import sys, time, apt_pkg
apt_pkg.init_config()
apt_pkg.config.set("Dir::Etc::Preferences", "/dev/null")
apt_pkg.config.set("Dir::Etc::PreferencesParts", sys.argv[1])
apt_pkg.init_system()
start = time.perf_counter()
apt_pkg.DepCache(apt_pkg.Cache(None))
print(time.perf_counter() - start)
"""


def main(runs=9):
    dirs = {name: tempfile.mkdtemp() for name in ("none", "role", "globs")}
    try:
        for name in os.listdir("/etc/apt/preferences.d"):
            shutil.copy(os.path.join("/etc/apt/preferences.d", name), dirs["role"])
        with open(os.path.join(dirs["globs"], "old.pref"), "w", encoding="utf-8") as handle:
            handle.write(OLD_GLOB_PIN)
        times = {name: [] for name in dirs}
        for _run in range(runs):
            for name, path in dirs.items():
                out = subprocess.run([sys.executable, "-c", CACHE_OPEN, path], capture_output=True, check=True,
                                     text=True).stdout
                times[name].append(float(out))
        print(json.dumps({"median_s": {name: round(statistics.median(value), 3) for name, value in times.items()},
                          "runs": runs, "role_files": sorted(os.listdir(dirs["role"]))}, indent=1))
    finally:
        for path in dirs.values():
            shutil.rmtree(path)


if __name__ == "__main__":
    main()

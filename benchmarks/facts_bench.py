#!/usr/bin/env python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Timing for nvidia_gpu_facts. Prints numbers; asserts nothing.

(a) Wall time of ``ansible localhost -m gpuhost.nvidia.nvidia_gpu_facts`` against ``-m ansible.builtin.ping``
    (median of N runs each, alternating, same connection and interpreter).
(b) In-process backends on the fake 8-GPU H100 board: the NVML backend (fake pynvml) against the nvidia-smi backend
    (parsing the 8-GPU XML, with and without running the fake nvidia-smi binary), and the PCI scan of the synthetic
    sysfs tree. With ``--gather`` the detail groups are collected too.

    .venv/bin/python benchmarks/facts_bench.py [--runs 9] [--iterations 200] [--skip-cli]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import typing as t

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKES = os.path.join(REPO, "tests", "unit", "fakes")
XML = os.path.join(REPO, "tests", "unit", "fixtures", "nvidia-smi-xml", "h100_sxm_8x_nvswitch.xml")
sys.path.insert(0, FAKES)

import fake_pynvml  # noqa: E402  pylint: disable=wrong-import-position
import sysfs  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts, _nvml, _pci, _smi  # noqa: E402  pylint: disable=wrong-import-position


def _median_ms(samples: list[float]) -> str:
    return "%8.2f ms (min %.2f, max %.2f, n=%d)" % (statistics.median(samples) * 1e3, min(samples) * 1e3, max(samples) * 1e3, len(samples))


def _time(func: t.Callable[[], t.Any], iterations: int) -> list[float]:
    func()  # warm caches and imports
    samples = []
    for _iteration in range(iterations):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return samples


def bench_cli(runs: int, python: str) -> None:
    ansible = os.path.join(os.path.dirname(python), "ansible")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    base = [ansible, "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=%s" % python, "localhost", "-m"]
    commands = {
        "ansible.builtin.ping": base + ["ansible.builtin.ping"],
        "gpuhost.nvidia.nvidia_gpu_facts": base + ["gpuhost.nvidia.nvidia_gpu_facts"],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for name, cmd in commands.items():  # one untimed warm-up each
        subprocess.run(cmd, capture_output=True, env=env, check=True, cwd=tempfile.gettempdir())
    for _run in range(runs):
        for name, cmd in commands.items():
            start = time.perf_counter()
            subprocess.run(cmd, capture_output=True, env=env, check=True, cwd=tempfile.gettempdir())
            samples[name].append(time.perf_counter() - start)
    print("(a) ansible localhost -m MODULE, wall time, median of %d" % runs)
    for name, values in samples.items():
        print("    %-34s %s" % (name, _median_ms(values)))
    delta = statistics.median(samples["gpuhost.nvidia.nvidia_gpu_facts"]) - statistics.median(samples["ansible.builtin.ping"])
    print("    %-34s %+8.2f ms" % ("facts minus ping", delta * 1e3))


def bench_backends(iterations: int, gather: tuple[str, ...]) -> None:
    profile = fake_pynvml.load_profile("h100_sxm_8x_nvswitch")
    fake = fake_pynvml.make_fake(profile)
    with open(XML, "r", encoding="utf-8") as handle:
        xml_text = handle.read()
    root = tempfile.mkdtemp(prefix="gpuhost-bench-")
    sysfs.build(root, profile)
    smi_script = os.path.join(FAKES, "fake_nvidia_smi.py")

    def canned(args: list[str]) -> tuple[int, str, str]:
        return 0, xml_text, ""

    def real_process(args: list[str]) -> tuple[int, str, str]:
        env = dict(os.environ, FAKE_NVIDIA_SMI_STDOUT=XML, LC_ALL="C")
        proc = subprocess.run([sys.executable, smi_script] + args[1:], capture_output=True, text=True, env=env, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    cases = {
        "NVML backend (fake pynvml)": lambda: _nvml.collect(gather, fake.module),
        "nvidia-smi backend, parse only": lambda: _smi.collect(canned, "nvidia-smi", gather),
        "nvidia-smi backend, fake binary": lambda: _smi.collect(real_process, "nvidia-smi", gather),
        "PCI scan (synthetic sysfs)": lambda: _pci.scan(root, sysfs.KERNEL_RELEASE),
        "merged facts, NVML + PCI": lambda: _facts.gather_facts(gather=gather, root=root, nv=fake.module),
    }
    print("(b) backends on the fake 8x H100 board, gather=%s, median of %d" % (list(gather), iterations))
    for name, func in cases.items():
        runs = iterations if "fake binary" not in name else max(5, iterations // 10)
        print("    %-34s %s" % (name, _median_ms(_time(func, runs))))
    counter = fake_pynvml.make_fake(profile)
    _nvml.collect(gather, counter.module)
    print("    %-34s %d" % ("NVML calls in one collect", len(counter.calls)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9, help="CLI runs per module (default 9)")
    parser.add_argument("--iterations", type=int, default=200, help="in-process iterations (default 200)")
    parser.add_argument("--skip-cli", action="store_true", help="only the in-process backends")
    args = parser.parse_args()
    print("python %s on %s, %s" % (platform.python_version(), platform.node(), platform.platform()))
    if not args.skip_cli:
        bench_cli(args.runs, sys.executable)
    bench_backends(args.iterations, ())
    bench_backends(args.iterations, ("processes", "utilization", "topology"))


if __name__ == "__main__":
    main()

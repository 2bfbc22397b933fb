# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU tier: run the collection's modules on this machine's GPUs, read-only, and compare them with nvidia-smi.

``gpu_tier.py run --out OUTDIR --collections DIR [--fake PROFILE [--mutate SIDE:PATH=VALUE]...]`` is what run.sh
calls once the Python environment and the collection are in place. Read-only by construction:

* every nvidia-smi goes through tier_guard.py, which runs only ``-q -x``, ``--help-query-gpu`` and
  ``--query-gpu=... --format=csv``, and logs every call;
* every ``import pynvml`` (the tier's and the modules') gets shim/pynvml.py, which refuses every NVML function but the
  getters;
* nvidia_smi_settings, gpu_compose_override and gpu_container_check run with ``check_mode: true`` only.

The GPUs' settings are read before and after the modules ran and compared. What the tier saw goes to OUTDIR in seven
files (see OUTPUTS); ``gpu_tier.py check OUTDIR`` runs the comparisons again from them, and
``gpu_tier.py import-capture OUTDIR`` turns them into unit test fixtures under tests/unit/fixtures/captured/.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import gzip
import json
import locale
import lzma
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import typing as t

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import tier_compare as tc  # noqa: E402  pylint: disable=wrong-import-position,import-error
import tier_guard  # noqa: E402  pylint: disable=wrong-import-position,import-error

OUTPUTS = {
    "xml": "nvidia-smi-q-x.xml",
    "csv": "nvidia-smi-query-gpu.csv",
    "nvml": "nvml.json",
    "facts": "facts.json",
    "plans": "plans.json",
    "doctor": "doctor.md",
    "summary": "summary.txt",
}
MAX_FILES = 7
MAX_BYTES = 16 * 1024 * 1024
NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
GATHER = ["processes", "utilization", "topology", "health"]
CAPTURED = os.path.join(REPO, "tests", "unit", "fixtures", "captured")
DEFAULT_IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"
PLAYBOOK_TIMEOUT = 420  # the whole tier must finish in 10 minutes
_COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


# -- NVML, read directly (runs in a child process, whose pynvml is the guarded shim) ---------------------------------
def nvml_read() -> dict[str, t.Any]:
    """What NVML itself says about each GPU, with no help from the collection."""
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        return {"available": False, "error": "import pynvml: %s" % exc, "gpus": []}
    error_cls = pynvml.NVMLError
    try:
        pynvml.nvmlInit()
    except error_cls as exc:
        return {"available": False, "error": "nvmlInit: %s" % exc, "gpus": []}

    def call(errors: dict[str, str], func: str, *args: t.Any) -> t.Any:
        try:
            return getattr(pynvml, func)(*args)
        except AttributeError:
            errors[func] = "not in this nvidia-ml-py"
        except error_cls as exc:
            errors[func] = str(exc)
        return None

    def text(value: t.Any) -> str | None:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    def pair(errors: dict[str, str], func: str, handle: t.Any) -> dict[str, int] | None:
        memory = call(errors, func, handle, pynvml.NVML_CLOCK_MEM)
        graphics = call(errors, func, handle, pynvml.NVML_CLOCK_GRAPHICS)
        return None if memory is None or graphics is None else {"memory_mhz": int(memory), "graphics_mhz": int(graphics)}

    def onoff(values: t.Any) -> dict[str, bool | None]:
        return {"current": None, "pending": None} if values is None else {"current": bool(values[0]), "pending": bool(values[1])}

    def watts(value: t.Any) -> float | None:
        return None if value is None else round(value / 1000.0, 3)

    system: dict[str, str] = {}
    try:
        cuda = call(system, "nvmlSystemGetCudaDriverVersion")
        result: dict[str, t.Any] = {
            "available": True,
            "error": None,
            "driver_version": text(call(system, "nvmlSystemGetDriverVersion")),
            "nvml_version": text(call(system, "nvmlSystemGetNVMLVersion")),
            "cuda_driver_version": cuda,
            "cuda_version": None if cuda is None else "%d.%d" % (cuda // 1000, (cuda % 1000) // 10),
            "errors": system,
            "gpus": [],
        }
        for index in range(call(system, "nvmlDeviceGetCount") or 0):
            errors: dict[str, str] = {}
            handle = call(errors, "nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                result["gpus"].append({"index": index, "errors": errors})
                continue
            pci = call(errors, "nvmlDeviceGetPciInfo", handle)
            memory = call(errors, "nvmlDeviceGetMemoryInfo", handle)
            persistence = call(errors, "nvmlDeviceGetPersistenceMode", handle)
            compute = call(errors, "nvmlDeviceGetComputeMode", handle)
            limits = call(errors, "nvmlDeviceGetPowerManagementLimitConstraints", handle) or [None, None]
            table = None
            memories = call(errors, "nvmlDeviceGetSupportedMemoryClocks", handle)
            if memories:
                table = {str(m): sorted((int(g) for g in call(errors, "nvmlDeviceGetSupportedGraphicsClocks", handle, m) or []), reverse=True)
                         for m in memories}
            result["gpus"].append(
                {
                    "index": index,
                    "bus_id": text(getattr(pci, "busId", None)),
                    "uuid": text(call(errors, "nvmlDeviceGetUUID", handle)),
                    "name": text(call(errors, "nvmlDeviceGetName", handle)),
                    "minor_number": call(errors, "nvmlDeviceGetMinorNumber", handle),
                    "memory_total_mib": None if memory is None else int(memory.total // (1024 * 1024)),
                    "persistence_mode": None if persistence is None else persistence == 1,
                    "compute_mode": _COMPUTE_MODES.get(compute) if compute is not None else None,
                    "power_limit_w": watts(call(errors, "nvmlDeviceGetPowerManagementLimit", handle)),
                    "power_limit_min_w": watts(limits[0]),
                    "power_limit_max_w": watts(limits[1]),
                    "power_default_limit_w": watts(call(errors, "nvmlDeviceGetPowerManagementDefaultLimit", handle)),
                    "ecc": onoff(call(errors, "nvmlDeviceGetEccMode", handle)),
                    "mig": onoff(call(errors, "nvmlDeviceGetMigMode", handle)),
                    "applications_clocks": pair(errors, "nvmlDeviceGetApplicationsClock", handle),
                    "default_applications_clocks": pair(errors, "nvmlDeviceGetDefaultApplicationsClock", handle),
                    "max_clocks": pair(errors, "nvmlDeviceGetMaxClockInfo", handle),
                    "supported_clocks": table,
                    "errors": errors,
                }
            )
        return result
    finally:
        try:
            pynvml.nvmlShutdown()
        except error_cls:
            pass


# -- the run --------------------------------------------------------------------------------------------------------------
class Tier:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.work = tempfile.mkdtemp(prefix="gpu-tier.")
        self.collections = os.path.abspath(args.collections)
        self.fake = args.fake
        self.root = "/"
        self.timings: dict[str, float] = {}
        self.record: dict[str, t.Any] = {}
        base = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPU_TIER_"))}
        bin_dir = os.path.join(self.work, "bin")
        os.makedirs(bin_dir)
        target = shutil.which("nvidia-smi", path=base.get("PATH"))
        extra: dict[str, str] = {}
        if self.fake:
            # Imported here only: the fakes need PyYAML and the unit tests' fake NVML, which a real run does not.
            import tier_fake  # pylint: disable=import-outside-toplevel,import-error

            prepared = tier_fake.prepare(os.path.join(self.work, "fake"), self.fake, args.mutate or [])
            extra.update(prepared["env"])
            self.root = prepared["root"]
            target = prepared["smi"]
        self.smi_path = os.path.join(bin_dir, "nvidia-smi")
        with open(self.smi_path, "w", encoding="utf-8") as handle:
            handle.write('#!/bin/sh\nexec "%s" "%s" nvidia-smi "$@"\n' % (sys.executable, os.path.join(HERE, "tier_guard.py")))
        os.chmod(self.smi_path, 0o755)
        self.smi_log = os.path.join(self.work, "nvidia-smi-calls.jsonl")
        self.nvml_log = os.path.join(self.work, "nvml-refused.jsonl")
        pythonpath = [os.path.join(HERE, "shim")] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
        self.env = dict(
            base,
            PATH=os.pathsep.join([bin_dir, base.get("PATH", "/usr/bin:/bin")]),
            PYTHONPATH=os.pathsep.join(pythonpath),
            GPU_TIER_SMI_TARGET=target or "",
            GPU_TIER_SMI_LOG=self.smi_log,
            GPU_TIER_NVML_LOG=self.nvml_log,
            **extra,
        )
        self.record.update(
            mode="fake profile %s" % self.fake if self.fake else "real GPU",
            mutations=list(args.mutate or []),
            nvidia_smi=target if not self.fake else "fake (tests/gpu/tier_fake.py)",
            root=self.root if not self.fake else "synthetic host tree",
            hostname=socket.gethostname(),
            machine=platform.machine(),
            kernel=platform.release(),
            python=sys.version.split()[0],
            started=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )

    # -- helpers
    def timed(self, name: str, start: float) -> None:
        self.timings[name] = round(time.monotonic() - start, 2)

    def smi(self, *args: str, phase: str = "before") -> tuple[int, str, str]:
        env = dict(self.env, GPU_TIER_PHASE=phase, LC_ALL="C", LANGUAGE="C")  # as the modules run it
        try:
            proc = subprocess.run([self.smi_path] + list(args), env=env, capture_output=True, text=True, check=False, timeout=120)
        except subprocess.TimeoutExpired:
            return -1, "", "nvidia-smi %s ran longer than 120 s" % " ".join(args)
        return proc.returncode, proc.stdout, proc.stderr

    def nvml(self, phase: str) -> dict[str, t.Any]:
        try:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "nvml-read"], env=dict(self.env, GPU_TIER_PHASE=phase),
                                  capture_output=True, text=True, check=False, timeout=120)
        except subprocess.TimeoutExpired:
            return {"available": False, "error": "reading NVML took longer than 120 s", "gpus": []}
        try:
            return json.loads(proc.stdout)
        except ValueError:
            return {"available": False, "error": "nvml-read exited %d: %s" % (proc.returncode, proc.stderr.strip()[-2000:]), "gpus": []}

    def csv_query(self, fields: list[str], phase: str) -> tuple[int, str, str]:
        return self.smi("--query-gpu=%s" % ",".join(fields), "--format=csv,nounits", phase=phase)

    # -- the playbook
    def playbook(self, specs: dict[str, t.Any], device_ids: list[t.Any], engine: str | None) -> dict[str, t.Any]:
        facts = "{{ facts_nvml.ansible_facts.nvidia_gpu }}"
        state_path = os.path.join(self.work, "run", "nvidia_smi_settings.json")
        compose_dir = os.path.join(self.work, "compose")
        os.makedirs(compose_dir)

        def step(name: str, module: str, args: dict[str, t.Any], check_mode: bool = False) -> dict[str, t.Any]:
            task: dict[str, t.Any] = {"name": name, module: args, "register": name}
            if check_mode:
                task["check_mode"] = True
            # Each step in its own block: a failing module (expected or not) is recorded and the play goes on.
            return {"name": "step %s" % name, "block": [task],
                    "rescue": [{"name": "%s failed (recorded)" % name, "ansible.builtin.debug": {"msg": "recorded by gpu_tier_record"}}]}

        tasks = [
            step("facts_nvml", "gpuhost.nvidia.nvidia_gpu_facts", {"backends": ["nvml", "pci"], "gather": GATHER, "root": self.root}),
            step("facts_smi", "gpuhost.nvidia.nvidia_gpu_facts", {"backends": ["nvidia-smi", "pci"], "gather": GATHER, "root": self.root}),
        ]
        for name, spec in specs.items():
            tasks.append(step("settings_%s" % name, "gpuhost.nvidia.nvidia_smi_settings", dict(spec["args"], state_path=state_path), check_mode=True))
        tasks += [
            step("doctor", "gpuhost.nvidia.nvidia_gpu_doctor", {"facts": facts, "root": self.root}),
            step("compose", "gpuhost.nvidia.gpu_compose_override", {
                "path": os.path.join(compose_dir, "docker-compose.gpu.yml"), "facts": facts,
                "services": [{"name": "gpu-all", "device_ids": device_ids}]}, check_mode=True),
            step("compose_vm", "gpuhost.nvidia.gpu_compose_override", {
                "path": os.path.join(compose_dir, "docker-compose.vm.yml"), "facts": facts, "vm_mode": True,
                "services": [{"name": "gpu-vm", "device_ids": device_ids[:1]}]}, check_mode=True),
        ]
        if engine:
            tasks.append(step("container", "gpuhost.nvidia.gpu_container_check", {
                "facts": facts, "docker_host": engine, "pull": "never", "fail_on_mismatch": False, "timeout": 120,
                "image": os.environ.get("GPU_TIER_IMAGE") or DEFAULT_IMAGE}, check_mode=True))
        play = [{"name": "GPU tier", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
        path = os.path.join(self.work, "gpu-tier.yml")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(play, handle, indent=1)  # JSON is YAML
        ansible_home = os.path.join(self.work, "ansible")
        config = os.path.join(self.work, "ansible.cfg")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write("[defaults]\n")
        results = os.path.join(self.work, "results.json")
        env = dict(
            self.env,
            ANSIBLE_CONFIG=config,
            ANSIBLE_HOME=ansible_home,
            ANSIBLE_LOCAL_TEMP=os.path.join(ansible_home, "tmp"),
            ANSIBLE_REMOTE_TEMP=os.path.join(ansible_home, "tmp"),
            ANSIBLE_COLLECTIONS_PATH=self.collections,
            ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
            ANSIBLE_CALLBACK_PLUGINS=os.path.join(HERE, "callback_plugins"),
            ANSIBLE_CALLBACKS_ENABLED="gpu_tier_record",
            ANSIBLE_PYTHON_INTERPRETER=sys.executable,
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_RETRY_FILES_ENABLED="false",
            ANSIBLE_LOCALHOST_WARNING="false",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
            GPU_TIER_RESULTS=results,
        )
        if locale.getpreferredencoding(False).lower().replace("-", "") != "utf8":
            env["LC_ALL"] = "C.UTF-8"  # Ansible needs a UTF-8 locale; the modules set LC_ALL=C for nvidia-smi themselves
        command = [sys.executable, "-m", "ansible", "playbook", "-i", "localhost,", "-c", "local",
                   "-e", json.dumps({"ansible_python_interpreter": sys.executable}), path]
        try:
            proc = subprocess.run(command, env=env, cwd=self.work, capture_output=True, text=True, check=False, timeout=PLAYBOOK_TIMEOUT)
            rc, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, output = "timeout", "%s\nthe playbook ran longer than %d s" % (exc.output or "", PLAYBOOK_TIMEOUT)
        with open(os.path.join(self.work, "ansible.log"), "w", encoding="utf-8") as handle:
            handle.write(output if isinstance(output, str) else output.decode("utf-8", "replace"))
        self.record["playbook"] = {"rc": rc, "tail": str(output).strip().splitlines()[-15:] if rc else []}
        try:
            with open(results, "r", encoding="utf-8") as handle:
                recorded = json.load(handle)
        except (OSError, ValueError):
            recorded = {}
        return {name: recorded[name] for name in recorded if not name.endswith("(recorded)") and not name.startswith("step ")}

    # -- the host, read directly
    def host(self, facts: dict[str, t.Any], results: dict[str, t.Any]) -> dict[str, t.Any]:
        root = self.root

        def under(path: str) -> str:
            return os.path.join(root, path.lstrip("/"))

        proc_version = None
        try:
            with open(under("/proc/driver/nvidia/version"), "r", encoding="utf-8", errors="replace") as handle:
                proc_version = handle.read()
        except OSError:
            pass
        nodes = set()
        for pattern in ("/dev/nvidia*", "/dev/nvidia-caps/*"):
            for path in glob.glob(under(pattern)):
                if not os.path.isdir(path):
                    nodes.add("/" + os.path.relpath(path, root))
        driver = facts.get("driver") or {}
        libraries = {}
        for path in (driver.get("library_paths") or {}).values():
            if path:
                full = under(path)
                libraries[path] = os.path.basename(os.path.realpath(full)) if os.path.exists(full) else None
        paths = {}
        vm = (((results.get("compose_vm") or {}).get("result") or {}).get("document") or {}).get("services") or {}
        for service in vm.values():
            for source in [v.get("source") for v in service.get("volumes") or []] + [d.split(":", 1)[0] for d in service.get("devices") or []]:
                if source:
                    paths[source] = os.path.exists(under(source))
        return {
            "proc_version": proc_version,
            "module_license": self.module_license(),
            "device_nodes": sorted(nodes),
            "libraries": libraries,
            "ldconfig": self.ldconfig() if root == "/" else None,
            "machine": platform.machine(),
            "paths": paths,
        }

    def module_license(self) -> str | None:
        """The license tag of the nvidia kernel module installed for the running kernel (open: Dual MIT/GPL)."""
        if self.root == "/":
            modinfo = shutil.which("modinfo", path=os.pathsep.join([os.environ.get("PATH", ""), "/sbin", "/usr/sbin"]))
            if modinfo:
                proc = subprocess.run([modinfo, "-F", "license", "nvidia"], capture_output=True, text=True, check=False)
                if proc.returncode == 0 and proc.stdout.strip():
                    return proc.stdout.strip()
            pattern = os.path.join("/lib/modules", platform.release(), "**", "nvidia.ko*")
        else:
            pattern = os.path.join(self.root, "lib/modules", "*", "**", "nvidia.ko*")
        for path in sorted(glob.glob(pattern, recursive=True)):
            opener: t.Any = lzma.open if path.endswith(".xz") else gzip.open if path.endswith(".gz") else open if path.endswith(".ko") else None
            if opener is None:
                continue
            with opener(path, "rb") as handle:
                match = re.search(rb"license=([^\x00]*)\x00", handle.read())
            if match:
                return match.group(1).decode("utf-8", "replace")
        return None

    @staticmethod
    def ldconfig() -> dict[str, list[list[str]]] | None:
        """``ldconfig -p``'s entries for the two libraries the facts name: [path, flags] pairs (flags: ``libc6,x86-64``)."""
        binary = next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
        if binary is None:
            return None
        proc = subprocess.run([binary, "-p"], capture_output=True, text=True, check=False)
        found: dict[str, list[list[str]]] = {"libnvidia-ml.so.1": [], "libcuda.so.1": []}
        for line in proc.stdout.splitlines():
            match = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
            if match and match.group(1) in found and [match.group(3), match.group(2)] not in found[match.group(1)]:
                found[match.group(1)].append([match.group(3), match.group(2)])
        return found

    def engine(self) -> tuple[str | None, str]:
        if self.fake:
            return None, "not run against the fakes"
        candidates = []
        if os.environ.get("DOCKER_HOST", "").startswith("unix://"):
            candidates.append(os.environ["DOCKER_HOST"][len("unix://"):])
        candidates += ["/var/run/docker.sock", "/run/podman/podman.sock"]
        for path in candidates:
            if os.path.exists(path):
                if not os.access(path, os.R_OK | os.W_OK):
                    return None, "%s exists but this user may not use it" % path
                return "unix://" + path, "found %s" % path
        return None, "none of %s exists" % ", ".join(candidates)

    # -- everything
    def run(self) -> int:
        """Read the GPUs, run the modules, read the settings again, compare, and write OUTDIR."""
        started = time.monotonic()
        start = time.monotonic()
        rc, xml_text, err = self.smi("-q", "-x")
        self.record["xml_status"] = _status("nvidia-smi -q -x", rc, err)
        _rc, help_text, _err = self.smi("--help-query-gpu")
        fields = tc.query_fields(tc.parse_help_query(help_text)) or list(tc.QUERY_FIELDS)
        self.record["query_fields"] = fields
        rc, csv_text, err = self.csv_query(fields, "before")
        self.record["csv_status"] = _status("nvidia-smi --query-gpu", rc, err)
        nvml = {"before": self.nvml("before")}
        self.timed("capture", start)

        start = time.monotonic()
        xml = tc.safe_parse_xml(xml_text)
        specs = tc.settings_specs(xml)
        engine, note = self.engine()
        self.record.update(container_engine=engine, container_engine_note=note)
        results = self.playbook(specs, tc.compose_device_ids(xml), engine)
        self.timed("modules", start)

        start = time.monotonic()
        _rc, self.record["csv_after"], _err = self.csv_query(fields, "after")
        nvml["after"] = self.nvml("after")
        self.timed("read_after", start)

        facts = {name: results.pop("facts_%s" % key, None) for name, key in (("nvml", "nvml"), ("nvidia-smi", "smi"))}
        facts["host"] = self.host(tc.facts_of(facts["nvml"]), results)
        self.record["nvidia_smi_calls"] = [{"argv": c["argv"], "allowed": c["allowed"]} for c in tier_guard.read_log(self.smi_log)]
        self.record["nvml_refused"] = [{"function": c["function"]} for c in tier_guard.read_log(self.nvml_log)]
        self.record["timings"] = self.timings
        plans = {"specs": specs, "results": results, "record": self.record}
        checks = tc.evaluate(tc.build_capture(xml_text, csv_text, nvml, facts, plans, self.record), load_schema(self.args.schema))
        self.record["duration_s"] = round(time.monotonic() - started, 1)
        self.record["checks"] = {c["name"]: c["status"] for c in checks}
        self.write(xml_text, csv_text, nvml, facts, plans)
        header = [
            "mode: %s%s" % (self.record["mode"], " (mutations: %s)" % ", ".join(self.record["mutations"]) if self.record["mutations"] else ""),
            "host: %s (%s, kernel %s, Python %s), started %s" % (
                self.record["hostname"], self.record["machine"], self.record["kernel"], self.record["python"], self.record["started"]),
            "driver: %s; GPUs: %s" % (xml["driver_version"], ", ".join(sorted({g["name"] or "?" for g in xml["gpus"]})) or "none"),
            "time: %.1f s (%s)" % (self.record["duration_s"], ", ".join("%s %.1f s" % item for item in self.timings.items())),
            "files: %s" % self.out,
        ]
        checks.append(limits_check(self.out, len(tc.summary_text(checks, header)) + 200))
        summary = tc.summary_text(checks, header)
        with open(os.path.join(self.out, OUTPUTS["summary"]), "w", encoding="utf-8") as handle:
            handle.write(summary)
        sys.stdout.write(summary)
        if self.args.keep_work:
            sys.stdout.write("work directory kept: %s\n" % self.work)
        else:
            shutil.rmtree(self.work, ignore_errors=True)
        return 1 if any(c["status"] == tc.FAIL for c in checks) else 0

    def write(self, xml_text: str, csv_text: str, nvml: dict[str, t.Any], facts: dict[str, t.Any], plans: dict[str, t.Any]) -> None:
        """Every output but the summary: the captures verbatim, the rest as JSON, the doctor's report as Markdown."""
        doctor = ((plans["results"].get("doctor") or {}).get("result") or {})
        report = doctor.get("markdown") or "# GPU doctor\n\nThe doctor did not run: %s\n" % doctor.get("msg")
        files = {
            "xml": xml_text,
            "csv": csv_text,
            "nvml": json.dumps(nvml, indent=1, sort_keys=True) + "\n",
            "facts": json.dumps(facts, indent=1, sort_keys=True, default=str) + "\n",
            "plans": json.dumps(plans, indent=1, sort_keys=True, default=str) + "\n",
            "doctor": report.rstrip("\n") + "\n\n```\n" + "\n".join(doctor.get("table") or []) + "\n```\n",
        }
        os.makedirs(self.out, exist_ok=True)
        for key, content in files.items():
            with open(os.path.join(self.out, OUTPUTS[key]), "w", encoding="utf-8") as handle:
                handle.write(content)


def _status(command: str, rc: int, err: str) -> str:
    return "%s exited %d%s" % (command, rc, ": " + err.strip()[:300] if err.strip() else "")


def limits_check(out: str, pending_bytes: int = 0) -> dict[str, t.Any]:
    """OUTDIR holds at most MAX_FILES plain files, MAX_BYTES in all, named with letters, digits, '.', '_' and '-'."""
    names = sorted(os.listdir(out))
    if OUTPUTS["summary"] not in names:
        names.append(OUTPUTS["summary"])
    size = sum(os.path.getsize(os.path.join(out, n)) for n in names if os.path.isfile(os.path.join(out, n))) + pending_bytes
    bad = [n for n in names if not NAME_RE.match(n) or (os.path.exists(os.path.join(out, n)) and not os.path.isfile(os.path.join(out, n)))]
    ok = len(names) <= MAX_FILES and size < MAX_BYTES and not bad
    return tc.check("outputs.limits", ok, "%d files (at most %d), %.1f KiB (under %d MiB)%s" % (
        len(names), MAX_FILES, size / 1024.0, MAX_BYTES // (1024 * 1024), "; bad names or types: %s" % bad if bad else ""))


def load_schema(path: str | None) -> dict[str, t.Any] | None:
    candidates = [path] if path else []
    candidates += [os.path.join(REPO, ".cache", "gpu-bundle", "compose-spec.json"),
                   os.path.normpath(os.path.join(REPO, "..", "shared", "schemas", "compose-spec.json"))]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            with open(candidate, "r", encoding="utf-8") as handle:
                return json.load(handle)
    return None


# -- captures ---------------------------------------------------------------------------------------------------------------
def load_capture(directory: str) -> dict[str, t.Any]:
    """A capture directory (OUTDIR, or a fixture under tests/unit/fixtures/captured/) as tier_compare.evaluate takes it."""

    def read(key: str) -> str:
        with open(os.path.join(directory, OUTPUTS[key]), "r", encoding="utf-8") as handle:
            return handle.read()

    plans = json.loads(read("plans"))
    return tc.build_capture(read("xml"), read("csv"), json.loads(read("nvml")), json.loads(read("facts")), plans, plans.get("record") or {})


def capture_name(directory: str) -> str:
    xml = tc.safe_parse_xml(load_text(os.path.join(directory, OUTPUTS["xml"])))
    model = (xml["gpus"][0]["name"] if xml["gpus"] else None) or "no-gpu"
    model = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    count = len(xml["gpus"])
    return "%s%s_%s" % ("%dx-" % count if count > 1 else "", model, xml["driver_version"] or "unknown")


def load_text(path: str) -> str:
    with open(path, "r", encoding="utf-8") as handle:
        return handle.read()


_UUID_RE = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")


def import_capture(directory: str, dest_root: str, name: str | None, source: str) -> str:
    """Copy a capture into tests/unit/fixtures/captured/<name>/: UUIDs, serials and the host name masked, plus PROVENANCE.md."""
    name = name or capture_name(directory)
    if not NAME_RE.match(name):
        raise SystemExit("the fixture name %r may hold letters, digits, '.', '_' and '-' only" % name)
    dest = os.path.join(dest_root, name)
    if os.path.exists(dest):
        raise SystemExit("%s exists; remove it first or pass --name" % dest)
    texts = {key: load_text(os.path.join(directory, OUTPUTS[key])) for key in ("xml", "csv", "nvml", "facts", "plans")}
    record = json.loads(texts["plans"]).get("record") or {}
    mapping: dict[str, str] = {}
    for match in _UUID_RE.finditer(texts["xml"] + texts["nvml"] + texts["facts"]):
        mapping.setdefault(match.group(0), "%s-00000000-0000-4000-8000-%012d" % (match.group(1), len(mapping)))
    for key, text in texts.items():
        text = _UUID_RE.sub(lambda m: mapping[m.group(0)] if m.group(0) in mapping else m.group(0), text)
        texts[key] = re.sub(r"<serial>[^<]*</serial>", "<serial>0000000000000</serial>", text)
    # The host name is in two places only: the record and the doctor's report heading.
    plans = json.loads(texts["plans"])
    hostname = plans.get("record", {}).get("hostname")
    if hostname:
        plans["record"]["hostname"] = "gpu-host"
        doctor = (plans.get("results", {}).get("doctor") or {}).get("result") or {}
        if isinstance(doctor.get("markdown"), str):
            doctor["markdown"] = doctor["markdown"].replace("# GPU doctor: %s\n" % hostname, "# GPU doctor: gpu-host\n", 1)
        texts["plans"] = json.dumps(plans, indent=1, sort_keys=True) + "\n"
    os.makedirs(dest)
    for key, text in texts.items():
        with open(os.path.join(dest, OUTPUTS[key]), "w", encoding="utf-8") as handle:
            handle.write(text)
    checks = record.get("checks") or {}
    failed = sorted(n for n, s in checks.items() if s == tc.FAIL)
    xml = tc.safe_parse_xml(texts["xml"])
    with open(os.path.join(dest, "PROVENANCE.md"), "w", encoding="utf-8") as handle:
        handle.write(
            "# %s\n\n"
            "- Source: %s\n"
            "- Captured: %s by `tests/gpu/run.sh` (%s), machine %s, kernel %s, Python %s\n"
            "- GPUs: %s; driver %s, CUDA %s\n"
            "- Tier result at capture time: %s\n"
            "- Masked on import: %d GPU/MIG UUID(s) (consistently across the files), `<serial>`, the host name\n"
            "- Files: the tier's own output, unchanged otherwise: %s\n"
            % (name, source, record.get("started"), record.get("mode"), record.get("machine"), record.get("kernel"), record.get("python"),
               ", ".join(g["name"] or "?" for g in xml["gpus"]) or "none", xml["driver_version"], xml["cuda_version"],
               "FAIL (%s)" % ", ".join(failed) if failed else "PASS", len(mapping),
               ", ".join(OUTPUTS[k] for k in ("xml", "csv", "nvml", "facts", "plans")))
        )
    return dest


# -- command line -------------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_tier.py", description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the tier (run.sh prepares the environment and calls this)")
    run.add_argument("--out", required=True, help="where the capture and summary go")
    run.add_argument("--collections", required=True, help="a collections path holding ansible_collections/gpuhost/nvidia")
    run.add_argument("--fake", metavar="PROFILE", help="run against the fake NVML, nvidia-smi and host tree of a unit-test profile")
    run.add_argument("--mutate", action="append", metavar="SIDE:PATH=VALUE", help="with --fake: make one side lie (see tier_fake.py)")
    run.add_argument("--schema", help="compose-spec.json (default: the bundle's, else ../shared/schemas)")
    run.add_argument("--keep-work", action="store_true", help="keep the work directory (playbook, ansible.log, fake tree)")
    check = sub.add_parser("check", help="run the comparisons again on a capture directory")
    check.add_argument("directory")
    check.add_argument("--schema")
    imp = sub.add_parser("import-capture", help="copy a capture into tests/unit/fixtures/captured/<gpu>_<driver>/")
    imp.add_argument("directory")
    imp.add_argument("--name", help="the fixture directory name (default: <model>_<driver>)")
    imp.add_argument("--dest", default=CAPTURED, help="where fixture directories live (default: %(default)s)")
    imp.add_argument("--source", default="an NVIDIA GPU machine", help="who ran it where, for PROVENANCE.md")
    sub.add_parser("nvml-read", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.command == "nvml-read":
        sys.stdout.write(json.dumps(nvml_read(), sort_keys=True))
        return 0
    if args.command == "check":
        checks = tc.evaluate(load_capture(args.directory), load_schema(args.schema))
        sys.stdout.write(tc.summary_text(checks, ["capture: %s (checked again)" % args.directory]))
        return 1 if any(c["status"] == tc.FAIL for c in checks) else 0
    if args.command == "import-capture":
        sys.stdout.write("%s\n" % import_capture(args.directory, args.dest, args.name, args.source))
        return 0
    if args.mutate and not args.fake:
        parser.error("--mutate needs --fake")
    return Tier(args).run()


if __name__ == "__main__":
    sys.exit(main())

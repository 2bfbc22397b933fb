# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What keeps the GPU tier read-only: an allow-list for nvidia-smi and a pynvml whose setters refuse.

Every nvidia-smi that the tier and the modules it runs start is this file (through a ``nvidia-smi`` wrapper first in
PATH): ``python tier_guard.py nvidia-smi ARGS...`` runs the real binary (GPU_TIER_SMI_TARGET) only when ARGS is one of
the query forms in :func:`smi_allowed`, and logs every call, allowed or not, to GPU_TIER_SMI_LOG as a JSON line.

The tier's ``pynvml`` (shim/pynvml.py) is :func:`guard_module` around nvidia-ml-py: every NVML function that is not a
getter (:func:`nvml_allowed`) raises NVMLError_NoPermission without reaching the library, and is logged to
GPU_TIER_NVML_LOG.
"""

from __future__ import annotations

import json
import os
import re
import sys
import types
import typing as t

# The only nvidia-smi argument lists the tier needs; anything else is refused.
_QUERY_GPU_RE = re.compile(r"^--query-gpu=[a-z0-9_.]+(,[a-z0-9_.]+)*$")
_FORMATS = ("--format=csv", "--format=csv,nounits")

# The NVML functions the tier lets through: getters (nvml<Object>Get...), loading and unloading the library in this
# process, and a few queries that do not say "Get". Every other nvml* function is refused: an allow-list, as for
# nvidia-smi, so that a setter added to a later nvidia-ml-py is refused too.
_NVML_GETTER_RE = re.compile(r"^nvml(Device|System|Unit|GpuInstance|ComputeInstance|VgpuInstance|VgpuType)?Get[A-Z]")
_NVML_ALSO_ALLOWED = frozenset(
    (
        "nvmlInit", "nvmlInitWithFlags", "nvmlInit_v2", "nvmlShutdown", "nvmlErrorString", "nvmlExceptionClass",
        "nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct", "nvmlDeviceIsMigDeviceHandle", "nvmlDeviceOnSameBoard",
        "nvmlDeviceQueryDrainState", "nvmlGpmQueryDeviceSupport", "nvmlGpmQueryIfStreamingEnabled",
    )
)


def smi_allowed(args: t.Sequence[str]) -> bool:
    """True for ``-q -x``, ``--help-query-gpu`` and ``--query-gpu=FIELDS --format=csv[,nounits]``; nothing else."""
    args = list(args)
    if args in (["-q", "-x"], ["--help-query-gpu"]):
        return True
    return len(args) == 2 and bool(_QUERY_GPU_RE.match(args[0])) and args[1] in _FORMATS


def nvml_allowed(name: str) -> bool:
    """Whether the tier may call the pynvml function ``name``: only getters and the few reads listed above."""
    return name in _NVML_ALSO_ALLOWED or bool(_NVML_GETTER_RE.match(name))


def _log(path: str | None, record: dict[str, t.Any]) -> None:
    if not path:
        return
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def read_log(path: str) -> list[dict[str, t.Any]]:
    if not os.path.exists(path):
        return []
    with open(path, "r", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def guard_module(target: types.ModuleType, log_path: str | None) -> types.ModuleType:
    """A copy of the pynvml module ``target`` in which every nvml* function not :func:`nvml_allowed` refuses and is logged."""
    guarded = types.ModuleType("pynvml", getattr(target, "__doc__", None))
    guarded.__dict__.update({k: v for k, v in vars(target).items() if k not in ("__name__", "__spec__", "__loader__")})
    guarded.__gpu_tier_guarded__ = True
    for name, value in vars(target).items():
        if name.startswith("nvml") and callable(value) and not isinstance(value, type) and not nvml_allowed(name):
            setattr(guarded, name, _refuser(target, name, log_path))
    return guarded


def _refuser(target: types.ModuleType, name: str, log_path: str | None) -> t.Callable[..., t.Any]:
    def refuse(*args: t.Any, **kwargs: t.Any) -> t.Any:
        _log(log_path, {"function": name, "pid": os.getpid()})
        raise target.NVMLError(target.NVML_ERROR_NO_PERMISSION)

    refuse.__name__ = name
    return refuse


def smi_main(args: list[str]) -> int:
    """The guarded nvidia-smi: run the target for allowed argument lists, refuse (exit 64) everything else."""
    allowed = smi_allowed(args)
    _log(os.environ.get("GPU_TIER_SMI_LOG"), {"argv": args, "allowed": allowed, "pid": os.getppid()})
    if not allowed:
        sys.stderr.write("gpu tier: refused nvidia-smi %s (the GPU tier only runs nvidia-smi's query forms)\n" % " ".join(args))
        return 64
    target = os.environ.get("GPU_TIER_SMI_TARGET")
    if not target or not os.path.isfile(target):
        sys.stderr.write("gpu tier: nvidia-smi not found (%s)\n" % (target or "GPU_TIER_SMI_TARGET is not set"))
        return 127
    sys.stdout.flush()
    if target.endswith(".py"):
        os.execv(sys.executable, [sys.executable, target] + args)
    os.execv(target, [target] + args)
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "nvidia-smi":
        sys.stderr.write("usage: tier_guard.py nvidia-smi ARGS...\n")
        sys.exit(2)
    sys.exit(smi_main(sys.argv[2:]))

"""Read-only NVML probe for the GPU tier: what each getter answers on a real GPU, errors included.

Only nvmlInit/nvmlShutdown and nvml*Get* getters are called; nothing is set. The output is JSON on stdout:
per device the identity fields the node labels need, and every process query with its answer or its NVML error,
per GPU and per MIG device.
"""

from __future__ import annotations

import json
import os
import sys

import pynvml


def ask(fn, *args):
    """Call a getter; return {"value": ...} or {"error": "<NVML error name>", "code": n}."""
    assert fn.__name__.startswith(("nvmlDeviceGet", "nvmlSystemGet", "nvmlGetExcluded")), fn.__name__
    try:
        value = fn(*args)
    except pynvml.NVMLError as err:  # noqa: PERF203
        return {"error": type(err).__name__, "code": getattr(err, "value", None), "text": str(err)}
    except Exception as err:  # pylint: disable=broad-except
        return {"exception": type(err).__name__, "text": str(err)}
    return {"value": plain(value)}


def plain(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "_fields_"):
        return {field[0]: plain(getattr(value, field[0])) for field in value._fields_}
    if hasattr(value, "__dict__") and not isinstance(value, (int, float, str)):
        return {k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return value


PROCESS_QUERIES = [
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
]


def device(handle):
    out = {}
    for name in [
        "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetMigMode", "nvmlDeviceGetBrand",
        "nvmlDeviceGetArchitecture", "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetVirtualizationMode", "nvmlDeviceGetBoardPartNumber",
        "nvmlDeviceGetMinorNumber",
    ]:
        fn = getattr(pynvml, name, None)
        out[name] = ask(fn, handle) if fn else {"missing": True}
    for name in PROCESS_QUERIES:
        fn = getattr(pynvml, name, None)
        out[name] = ask(fn, handle) if fn else {"missing": True}
    bus = out["nvmlDeviceGetPciInfo"].get("value", {}).get("busId", "")
    if bus:
        sysdir = "/sys/bus/pci/devices/" + bus.lower()[-12:]
        for attr in ("class", "device", "vendor", "subsystem_device"):
            try:
                with open(os.path.join(sysdir, attr), encoding="ascii") as fh:
                    out["sysfs_" + attr] = fh.read().strip()
            except OSError as err:
                out["sysfs_" + attr] = "error: %s" % err
    mig = []
    count = out["nvmlDeviceGetMaxMigDeviceCount"].get("value") or 0
    for i in range(count):
        got = ask(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
        if "error" in got:
            mig.append({"index": i, "handle": got})
            continue
        mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        mig.append({"index": i, **{n: ask(getattr(pynvml, n), mh) for n in PROCESS_QUERIES + ["nvmlDeviceGetUUID"]}})
    out["mig_devices"] = mig
    return out


def main():
    pynvml.nvmlInit()
    try:
        result = {
            "nvml_version": ask(pynvml.nvmlSystemGetNVMLVersion),
            "driver_version": ask(pynvml.nvmlSystemGetDriverVersion),
            "cuda_driver_version": ask(pynvml.nvmlSystemGetCudaDriverVersion),
            "cuda_driver_version_v2": ask(getattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2")),
            "pynvml_version": getattr(pynvml, "__version__", None),
            "devices": [],
        }
        for i in range(pynvml.nvmlDeviceGetCount()):
            result["devices"].append(device(pynvml.nvmlDeviceGetHandleByIndex(i)))
    finally:
        pynvml.nvmlShutdown()
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    print()


if __name__ == "__main__":
    main()

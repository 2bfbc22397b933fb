# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_container_check: the pure request choice and comparison, and the module against a fake Engine API client."""

from __future__ import annotations

import typing as t

import pytest
from docker import errors as docker_errors

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _verify
from ansible_collections.gpuhost.nvidia.plugins.modules import gpu_container_check

U0 = "GPU-0a1b2c3d-0000-4000-8000-000000000000"
U1 = "GPU-0a1b2c3d-0000-4000-8000-000000000001"
FACTS = {
    "state": "ok",
    "gpus": [
        {"index": 0, "uuid": U0, "state": "ok"},
        {"index": 1, "uuid": U1, "state": "ok"},
        {"index": None, "uuid": None, "pci_bus_id": "0000:65:00.0", "state": "pci_only"},
    ],
}
LIST_2 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: %s)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: %s)\n" % (U0, U1)
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
             "driver is installed and running.\n")
PODMAN_INFO = {"Runtimes": {"runc": {"path": "/usr/bin/runc"}, "crun": {"path": "/usr/bin/crun"}}, "DefaultRuntime": "runc",
               "ServerVersion": "4.3.1", "OperatingSystem": "Debian GNU/Linux 12 (bookworm)"}
DOCKER_INFO = {"Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}, "DefaultRuntime": "runc",
               "ServerVersion": "27.3.1", "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}


def test_parse_list_with_mig() -> None:
    text = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa-1)\n"
            "  MIG 3g.20gb     Device  0: (UUID: MIG-bbbb-2)\n"
            "  MIG 1g.5gb      Device  1: (UUID: MIG-cccc-3)\n")
    parsed = _verify.parse_list(text)
    assert parsed["gpus"] == [{"index": 0, "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-aaaa-1"}]
    assert [m["uuid"] for m in parsed["mig"]] == ["MIG-bbbb-2", "MIG-cccc-3"]
    assert parsed["mig"][0] == {"profile": "3g.20gb", "device": 0, "uuid": "MIG-bbbb-2", "gpu_uuid": "GPU-aaaa-1"}


@pytest.mark.parametrize(
    "code, output, ids, passed, reason",
    [
        (0, LIST_2, [], True, "the container sees the 2 expected GPU(s): %s, %s" % (U0, U1)),
        (9, NO_DRIVER, [], False, "no GPU visible in the container: nvidia-smi exited 9: NVIDIA-SMI has failed because it "
         "couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.; "
         "the host's facts list 2 GPU(s) (state ok)"),
        (6, "No devices were found\n", [], False, "no GPU visible in the container: nvidia-smi exited 6: No devices were found; "
         "the host's facts list 2 GPU(s) (state ok)"),
        (0, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: %s)\n" % U0, [], False,
         "the container sees 1 GPU(s), the host's facts list 2 GPU(s) (state ok); not visible in the container: %s" % U1),
        (0, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: %s)\n" % U1, ["0"], False,
         "the container sees 1 GPU(s), the host's facts list 1 GPU(s) (state ok); not visible in the container: %s; "
         "not in the host's facts: %s" % (U0, U1)),
        (0, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: %s)\n" % U1, [U1], True, "the container sees the 1 expected GPU(s): %s" % U1),
    ],
)
def test_compare(code: int, output: str, ids: list[str], passed: bool, reason: str) -> None:
    result = _verify.compare(FACTS, code, output, ids)
    assert (result["passed"], result["reason"]) == (passed, reason)


def test_choose_request() -> None:
    podman = _verify.engine_summary(PODMAN_INFO)
    docker = _verify.engine_summary(DOCKER_INFO)
    assert docker["nvidia_runtime"] and docker["cdi_enabled"] and not podman["nvidia_runtime"] and not podman["cdi_enabled"]
    assert _verify.choose_request("auto", docker) == ("runtime", ["the engine knows the nvidia runtime"])
    with pytest.raises(_verify.VerifyError, match=r"^the engine \(Debian GNU/Linux 12 \(bookworm\) 4.3.1\) knows no nvidia runtime "
                       r"\(runtimes: crun, runc\) and has CDI disabled"):
        _verify.choose_request("auto", podman)
    with pytest.raises(_verify.VerifyError, match="CDI is not enabled in the engine"):
        _verify.choose_request("cdi", podman)
    with pytest.raises(_verify.VerifyError, match="knows no nvidia runtime"):
        _verify.choose_request("runtime", podman)
    mode, notes = _verify.choose_request("gpus", podman)
    assert mode == "gpus" and notes == ["a --gpus device request; the engine does not say whether it can serve one and knows no nvidia runtime"]
    no_runtime_cdi = _verify.engine_summary(dict(DOCKER_INFO, Runtimes={"runc": {}}))
    assert _verify.choose_request("auto", no_runtime_cdi)[0] == "cdi"


def test_container_options() -> None:
    assert _verify.container_options("gpus", []) == {
        "device_requests": [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]]}], "environment": {}}
    assert _verify.container_options("gpus", ["0"])["device_requests"][0]["DeviceIDs"] == ["0"]
    assert _verify.container_options("runtime", [U0]) == {"runtime": "nvidia", "environment": {"NVIDIA_VISIBLE_DEVICES": U0}}
    assert _verify.container_options("cdi", [])["device_requests"][0] == {
        "Driver": "cdi", "Count": 0, "DeviceIDs": ["nvidia.com/gpu=all"], "Capabilities": None}


def test_start_failure() -> None:
    text = 'runc create failed: unable to start container process: exec: "nvidia-smi": executable file not found in $PATH'
    assert _verify.start_failure(text, ["nvidia-smi", "-L"]).startswith(
        "no GPU visible in the container: nvidia-smi is not in the image and the runtime injected no driver tools")
    assert _verify.start_failure("could not select device driver \"\" with capabilities: [[gpu]]", ["nvidia-smi"]).startswith(
        "the engine has no GPU device driver for the --gpus request")


# -- the module against a fake SDK client ---------------------------------------------------------------------


class FakeContainer:
    def __init__(self, engine: "FakeEngine", image: str, command: list[str], kwargs: dict[str, t.Any]):
        self.engine, self.image, self.command, self.kwargs = engine, image, command, kwargs
        self.removed = False

    def start(self) -> None:
        if self.engine.start_error:
            raise docker_errors.APIError("500 Server Error", explanation=self.engine.start_error)

    def wait(self, timeout: int) -> dict[str, int]:
        return {"StatusCode": self.engine.exit_code}

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        return self.engine.output.encode()

    def remove(self, force: bool) -> None:
        self.removed = True


class FakeEngine:
    def __init__(self, info: dict[str, t.Any], images: set[str], exit_code: int = 0, output: str = "", start_error: str | None = None):
        self.info_data, self.image_set = info, images
        self.exit_code, self.output, self.start_error = exit_code, output, start_error
        self.created: list[FakeContainer] = []
        self.pulled: list[str] = []
        engine = self

        class Images:
            def get(self, name: str) -> None:
                if name not in engine.image_set:
                    raise docker_errors.ImageNotFound("No such image: %s" % name)

            def pull(self, name: str) -> None:
                engine.pulled.append(name)
                engine.image_set.add(name)

        class Containers:
            def create(self, image: str, command: list[str], **kwargs: t.Any) -> FakeContainer:
                container = FakeContainer(engine, image, command, kwargs)
                engine.created.append(container)
                return container

        self.images = Images()
        self.containers = Containers()

    def info(self) -> dict[str, t.Any]:
        return self.info_data


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> t.Callable[..., FakeEngine]:
    def install(*args: t.Any, **kwargs: t.Any) -> FakeEngine:
        fake = FakeEngine(*args, **kwargs)
        monkeypatch.setattr(gpu_container_check.docker, "DockerClient", lambda **_kw: fake)
        return fake

    return install


def test_module_passes_with_runtime(engine: t.Any, run_module: t.Any) -> None:
    fake = engine(DOCKER_INFO, {"cuda:local"}, output=LIST_2)
    result = run_module(gpu_container_check, {"facts": FACTS, "image": "cuda:local", "pull": "never"})
    assert result["passed"] is True and not result.get("failed") and result["changed"] is False
    assert result["request"] == "runtime" and fake.pulled == []
    assert "image cuda:local present, not pulled" in result["notes"]
    (container,) = fake.created
    assert container.kwargs["runtime"] == "nvidia" and container.kwargs["environment"] == {"NVIDIA_VISIBLE_DEVICES": "all"}
    assert container.command == ["nvidia-smi", "-L"] and container.removed


def test_module_fails_cleanly_without_gpu_on_podman(engine: t.Any, run_module: t.Any) -> None:
    fake = engine(PODMAN_INFO, {"cuda:local"}, exit_code=9, output=NO_DRIVER)
    result = run_module(gpu_container_check, {"facts": {"state": "no_gpu", "gpus": []}, "image": "cuda:local", "request": "gpus"})
    assert result["failed"] is True and result["passed"] is False
    assert result["msg"].startswith("no GPU visible in the container: nvidia-smi exited 9: NVIDIA-SMI has failed")
    assert result["msg"].endswith("the host's facts list 0 GPU(s) (state no_gpu)")
    assert fake.created[0].kwargs["device_requests"][0]["Count"] == -1 and fake.created[0].removed
    result = run_module(gpu_container_check, {"facts": {"state": "no_gpu", "gpus": []}, "image": "cuda:local", "request": "gpus",
                                              "fail_on_mismatch": False})
    assert not result.get("failed") and result["passed"] is False and result["exit_code"] == 9


def test_module_auto_on_podman_names_the_runtimes(engine: t.Any, run_module: t.Any) -> None:
    fake = engine(PODMAN_INFO, {"cuda:local"})
    result = run_module(gpu_container_check, {"facts": FACTS, "image": "cuda:local"})
    assert result["failed"] and "knows no nvidia runtime (runtimes: crun, runc) and has CDI disabled" in result["msg"]
    assert fake.created == []


def test_module_missing_image(engine: t.Any, run_module: t.Any) -> None:
    fake = engine(DOCKER_INFO, set(), output=LIST_2)
    result = run_module(gpu_container_check, {"facts": FACTS, "image": "cuda:gone", "pull": "never"})
    assert result["failed"] and result["msg"].startswith("the image cuda:gone is not present and pull=never: load it on the host")
    assert fake.pulled == [] and fake.created == []
    result = run_module(gpu_container_check, {"facts": FACTS, "image": "cuda:gone"}, check_mode=True)
    assert not result.get("failed") and fake.pulled == [] and fake.created == []
    assert result["reason"] == "check mode: the image cuda:gone is absent and would be pulled first; the container was not run"
    result = run_module(gpu_container_check, {"facts": FACTS, "image": "cuda:gone"})
    assert result["passed"] and result["image_pulled"] and fake.pulled == ["cuda:gone"]


def test_module_start_failure_removes_container(engine: t.Any, run_module: t.Any) -> None:
    fake = engine(DOCKER_INFO, {"cuda:local"}, start_error='exec: "nvidia-smi": executable file not found in $PATH')
    result = run_module(gpu_container_check, {"facts": FACTS, "image": "cuda:local", "request": "cdi"})
    assert result["failed"] and result["msg"].startswith("no GPU visible in the container: nvidia-smi is not in the image")
    (container,) = fake.created
    assert container.removed
    assert container.kwargs["device_requests"][0]["Driver"] == "cdi"


def test_module_unreachable_engine(monkeypatch: pytest.MonkeyPatch, run_module: t.Any) -> None:
    result = run_module(gpu_container_check, {"facts": FACTS, "docker_host": "unix:///nonexistent/engine.sock", "timeout": 2})
    assert result["failed"] and result["msg"].startswith("cannot reach the engine at unix:///nonexistent/engine.sock")


def test_module_without_docker_sdk(monkeypatch: pytest.MonkeyPatch, run_module: t.Any) -> None:
    monkeypatch.setattr(gpu_container_check, "HAS_DOCKER", False)
    monkeypatch.setattr(gpu_container_check, "DOCKER_IMPORT_ERROR", "ImportError: No module named 'docker'")
    result = run_module(gpu_container_check, {"facts": FACTS})
    assert result["failed"] and "docker (the Docker SDK for Python)" in result["msg"] and "python3-docker" not in result.get("exception", "")

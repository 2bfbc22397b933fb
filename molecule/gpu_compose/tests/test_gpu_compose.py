"""Verify the overrides that gpu_compose wrote on each test host (Debian 12, emulated Rocky 9 and Arch), from the files.

The overrides must be identical on every family. What differs (see molecule.yml): Debian gets PyYAML from the role and
validates through docker-compose; the emulated hosts run their Debian python3 with Debian's PyYAML installed by
prepare and write without validation.
"""

from __future__ import annotations


import pytest
import yaml

from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

H0 = "GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001"
H1 = "GPU-8b0e6c1d-51f4-4a54-8d2e-0c9f3e7b4002"
LIB = "/usr/lib/x86_64-linux-gnu/"


def load(host, path: str) -> dict:
    f = host.file(path)
    assert f.is_file, path
    return yaml.safe_load(f.content_string)


def reservation(service: dict) -> list[dict]:
    return service["deploy"]["resources"]["reservations"]["devices"]


@pytest.fixture(scope="module")
def family(gpuhost_instance: str) -> str:
    return gpuhost_instance.split("-")[1]


def test_pyyaml_for_the_module(host, family):
    assert host.run("/usr/bin/python3 -c 'import yaml'").rc == 0
    # Debian's python3-yaml in every case: the role installed it with apt on Debian, prepare with dpkg on the others.
    assert host.check_output("dpkg-query -W -f '${Status}' python3-yaml") == "install ok installed"
    if family == "rocky9":
        # The role's dependency step is off here: nothing reached the rpm database.
        assert host.run("rpm -q python3-pyyaml").rc != 0
    elif family == "arch":
        assert host.run("pacman -Q python-yaml").rc != 0


def test_app_override_contents(host):
    doc = load(host, "/srv/gpu-app/docker-compose.gpu.yml")
    app = doc["services"]["app"]
    assert reservation(app) == [{"driver": "nvidia", "device_ids": [H1], "capabilities": ["gpu"]}]
    env = app["environment"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == H1 and env["CUDA_VISIBLE_DEVICES"] == H1
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert env["EXTRA"] == "1"
    assert (app["ipc"], app["shm_size"], app["runtime"]) == ("host", "8g", "nvidia")
    assert app["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert "privileged" not in app and "image" not in app


def test_unmanaged_service_survives(host):
    doc = load(host, "/srv/gpu-app/docker-compose.gpu.yml")
    assert doc["services"]["sidecar"] == {"image": "busybox", "labels": {"owner": "ops"}}
    assert set(doc["services"]) == {"app", "sidecar"}


def test_existing_mode_is_kept_and_one_backup_was_made(host):
    f = host.file("/srv/gpu-app/docker-compose.gpu.yml")
    assert (f.user, f.group) == ("root", "root")
    assert f.mode == 0o644  # the role's mode wins over the hand-written 0640
    backups = host.run("find /srv/gpu-app -maxdepth 1 -name 'docker-compose.gpu.yml.*~'").stdout.split()
    assert len(backups) == 1, backups  # the idempotence run replaced nothing, so made no second backup
    assert "stale-by-hand" in host.file(backups[0]).content_string


def test_exclusive_project_got_one_gpu_each_and_was_pruned(host):
    doc = load(host, "/srv/gpu-train/docker-compose.gpu.yml")
    assert set(doc["services"]) == {"trainer", "evaluator"}  # old-job pruned
    trainer, evaluator = doc["services"]["trainer"], doc["services"]["evaluator"]
    assert reservation(trainer)[0]["device_ids"] == [H0]
    assert reservation(evaluator)[0]["device_ids"] == [H1]
    assert reservation(evaluator)[0]["capabilities"] == ["gpu", "compute", "utility"]


def test_vm_project(host):
    f = host.file("/srv/gpu-vm/compose.gpu.yml")
    assert f.mode == 0o600
    app = load(host, "/srv/gpu-vm/compose.gpu.yml")["services"]["app"]
    assert app["privileged"] is True
    assert "deploy" not in app
    assert app["devices"] == ["%s:%s" % (n, n) for n in ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm", "/dev/nvidiactl")]
    assert [v["source"] for v in app["volumes"]] == [
        LIB + "libnvidia-ml.so.1", LIB + "libnvidia-ml.so.550.54.15", LIB + "libcuda.so.1", LIB + "libcuda.so.550.54.15"
    ]
    assert all(v["read_only"] is True and v["source"] == v["target"] for v in app["volumes"])
    assert app["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "all"
    assert app["environment"]["NVIDIA_DISABLE_REQUIRE"] == "1"


def test_refused_requests_wrote_nothing(host):
    assert not host.file("/srv/gpu-bad/docker-compose.gpu.yml").exists
    assert host.run("ls -A /srv/gpu-bad").stdout.split() == ["docker-compose.yml"]


def test_docker_compose_merges_the_project_and_keeps_the_reservation(host, family):
    if family != "debian12":
        pytest.skip("docker-compose is on the Debian host only (molecule.yml)")
    cmd = host.run("cd /srv/gpu-app && LC_ALL=C docker-compose -f docker-compose.yml -f docker-compose.gpu.yml config")
    assert cmd.rc == 0, cmd.stderr
    merged = yaml.safe_load(cmd.stdout)["services"]["app"]
    assert merged["image"] == "busybox" and merged["environment"]["FOO"] == "bar"
    assert reservation(merged) == [{"driver": "nvidia", "device_ids": [H1], "capabilities": ["gpu"]}]


def test_no_temporary_files_left(host):
    leftovers = host.run("find /srv -name '.*.tmp'").stdout.split()
    assert leftovers == []

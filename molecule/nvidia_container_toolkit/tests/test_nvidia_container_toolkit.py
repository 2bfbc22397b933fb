"""Real state after the nvidia_container_toolkit role converged on Debian 12, emulated Rocky 9 and emulated Arch."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from gpuhost_testinfra import run_playbook_json  # noqa: F401  pylint: disable=unused-import
from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
SCENARIO = Path(__file__).resolve().parents[1]
# The schemas are shared next to the repository (<repo>/../shared), never copied into it.
CDI_SCHEMA = PROJECT.parent / "shared" / "schemas" / "cdi-spec.json"
DOCKERD = PROJECT / ".cache/dockerd-trixie/root/usr/sbin/dockerd"
# The same package's docker-proxy: dockerd's validation of the default userland-proxy looks for it, and must not
# depend on what else the machine has on PATH.
DOCKER_PROXY = DOCKERD.parent / "docker-proxy"
EXPECTED = {
    # instance family: (installed toolkit version, configured runtimes)
    "debian12": ("1.18.0", ["docker", "containerd", "crio"]),
    "rocky9": ("1.20.0", ["docker", "crio"]),
    "arch": ("1.17.8", ["containerd"]),
}
RUNTIME = "/usr/bin/nvidia-container-runtime"


def family(instance: str) -> str:
    return instance.split("-")[1]


def installed_version(host, fam: str, package: str) -> str | None:
    if fam == "debian12":
        out = host.run("dpkg-query -W -f '${Status} ${Version}' %s" % package)
        return out.stdout.split()[-1] if out.rc == 0 and "install ok installed" in out.stdout else None
    if fam == "rocky9":
        out = host.run("rpm -q --qf '%%{VERSION}-%%{RELEASE}' %s" % package)
        return out.stdout.strip() if out.rc == 0 else None
    out = host.run("pacman -Q %s" % package)
    return out.stdout.split()[-1] if out.rc == 0 else None


def test_toolkit_packages_at_the_expected_version(host, gpuhost_instance):
    fam = family(gpuhost_instance)
    version, _runtimes = EXPECTED[fam]
    packages = (["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]
                if fam != "arch" else ["nvidia-container-toolkit", "libnvidia-container"])
    for package in packages:
        assert installed_version(host, fam, package) == version + "-1", package
    assert host.run("nvidia-ctk --version").stdout.startswith("NVIDIA Container Toolkit CLI version %s" % version)


def test_repository_signed_by_the_pinned_key(host, gpuhost_instance):
    fam = family(gpuhost_instance)
    fingerprint = (PROJECT / ".cache/repos/current/key/fingerprint").read_text().strip()
    if fam == "debian12":
        sources = host.file("/etc/apt/sources.list.d/gpuhost-nvidia-container-toolkit.sources").content_string
        assert "Signed-By: /etc/apt/keyrings/gpuhost-nvidia-container-toolkit.gpg" in sources
        assert "URIs: file:/srv/gpuhost-repos/apt/" in sources
        keyring = "/etc/apt/keyrings/gpuhost-nvidia-container-toolkit.gpg"
        pin = host.file("/etc/apt/preferences.d/gpuhost-nvidia-container-toolkit.pref").content_string
        assert "Pin: version 1.18.0-*" in pin and "Pin-Priority: 1001" in pin
        # apt would pick 1.20.0 without the pin
        assert "1.20.0-1" in host.run("apt-cache madison nvidia-container-toolkit").stdout
    elif fam == "rocky9":
        repo = host.file("/etc/yum.repos.d/gpuhost-nvidia-container-toolkit.repo").content_string
        assert "repo_gpgcheck = 1" in repo and "gpgcheck = 1" in repo
        assert "gpgkey = file:///etc/pki/rpm-gpg/RPM-GPG-KEY-gpuhost-nvidia-container-toolkit" in repo
        keyring = "/etc/pki/rpm-gpg/RPM-GPG-KEY-gpuhost-nvidia-container-toolkit"
    else:
        assert not host.file("/etc/apt/sources.list.d/gpuhost-nvidia-container-toolkit.sources").exists
        return
    # Read with the controller's gpg: the hosts need no gpg since the key is checked by repository_key (#19).
    with tempfile.TemporaryDirectory() as home:
        colons = subprocess.run(["gpg", "--batch", "--homedir", home, "--show-keys", "--with-colons"], input=host.file(keyring).content,
                                capture_output=True, check=True).stdout.decode()
    assert [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")][:1] == [fingerprint]


def test_daemon_json_keeps_other_keys(host, gpuhost_instance):
    fam = family(gpuhost_instance)
    if "docker" not in EXPECTED[fam][1]:
        pytest.skip("docker is not configured on %s" % fam)
    daemon = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert daemon == {
        "log-driver": "journald",
        "registry-mirrors": ["https://mirror.example.internal"],
        "runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"path": RUNTIME}},
        "features": {"cdi": True},
    }
    backups = host.run("ls /etc/docker/").stdout.split()
    assert any(name.startswith("daemon.json.") and name.endswith("~") for name in backups), backups


def test_daemon_json_validates_with_dockerd(host, gpuhost_instance):
    if family(gpuhost_instance) != "debian12":
        pytest.skip("dockerd validation runs once, on the Debian host")
    assert DOCKERD.is_file(), f"{DOCKERD} is missing: prepare downloads Debian trixie's docker.io"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        handle.write(host.file("/etc/docker/daemon.json").content_string)
    validate = [str(DOCKERD), "--validate", "--userland-proxy-path", str(DOCKER_PROXY), "--config-file", handle.name]
    env = {"PATH": "/nonexistent", "LC_ALL": "C"}  # nothing from the machine's PATH: the package's own binaries only
    proc = subprocess.run(validate, capture_output=True, text=True, check=False, env=env)
    assert proc.returncode == 0 and "configuration OK" in proc.stdout + proc.stderr, proc.stderr
    # the validator is real: an unknown directive fails
    Path(handle.name).write_text('{"nvidia-runtime": true}')
    proc = subprocess.run(validate, capture_output=True, text=True, check=False, env=env)
    assert proc.returncode != 0 and "nvidia-runtime" in proc.stderr, proc.stderr


def test_containerd_config_dump_shows_the_merge(host, gpuhost_instance):
    fam = family(gpuhost_instance)
    if fam != "debian12":
        if fam == "arch":  # no containerd binary: the created main config imports the drop-in
            main = tomllib.loads(host.file("/etc/containerd/config.toml").content_string)
            assert main == {"version": 2, "imports": ["/etc/containerd/conf.d/*.toml"]}
            dropin = tomllib.loads(host.file("/etc/containerd/conf.d/99-nvidia.toml").content_string)
            runtime = dropin["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
            # no runtime to inherit from: nvidia-ctk's defaults, less the empty runtime_engine/runtime_root
            assert runtime == {"runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": False,
                               "options": {"BinaryName": RUNTIME}}
            return
        pytest.skip("containerd is not configured on %s" % fam)
    main_text = host.file("/etc/containerd/config.toml").content_string
    assert main_text.startswith("# site containerd config\nversion = 2\n")
    assert 'imports = ["/etc/containerd/site.toml", "/etc/containerd/conf.d/*.toml"]' in main_text
    dump = host.run("containerd --config /etc/containerd/config.toml config dump")
    assert dump.rc == 0, dump.stderr
    merged = tomllib.loads(dump.stdout)
    assert set(merged["imports"]) >= {"/etc/containerd/site.toml", "/etc/containerd/conf.d/99-nvidia.toml"}
    assert merged["debug"]["level"] == "warn"
    cri = merged["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.example.internal/pause:3.9"
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["nvidia"]["options"] == {"BinaryName": RUNTIME, "SystemdCgroup": True}
    assert cri["containerd"]["default_runtime_name"] == "runc"
    dropin = tomllib.loads(host.file("/etc/containerd/conf.d/99-nvidia.toml").content_string)
    assert dropin["plugins"]["io.containerd.grpc.v1.cri"]["enable_cdi"] is True  # nvidia_container_toolkit_containerd_cdi


# Real containerd (Debian 12's 1.6) starts on every config the role or the module wrote, on its own socket and state
# directories, and serves `ctr version`: containerd validates the merged config only when it starts (a version 2
# drop-in imported by a version 1 config passes `config dump` but is refused at start).
START_CONTAINERD = r"""
set -u
dir=$(mktemp -d /tmp/gpuhost-containerd.XXXXXX)
containerd --config "$1" --address "$dir/sock" --root "$dir/root" --state "$dir/state" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
    [ -S "$dir/sock" ] && ctr --address "$dir/sock" version >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
ctr --address "$dir/sock" version; rc=$?
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
[ "$rc" -eq 0 ] || cat "$dir/log"
rm -rf "$dir"
exit "$rc"
"""

CONTAINERD_CASES = {
    # config: (CRI plugin in the effective config, the runtime's expected table)
    "/etc/containerd/config.toml": ("io.containerd.grpc.v1.cri", {
        "runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": RUNTIME, "SystemdCgroup": True}}),
    "/etc/gpuhost-test/containerd-v1/config.toml": ("cri", {
        "runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": False,
        "options": {"BinaryName": RUNTIME, "Runtime": RUNTIME}}),
    "/etc/gpuhost-test/containerd-crun/config.toml": ("io.containerd.grpc.v1.cri", {
        "runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": True,
        "options": {"BinaryName": RUNTIME, "SystemdCgroup": True}}),
}


@pytest.mark.parametrize("config", list(CONTAINERD_CASES))
def test_real_containerd_starts_on_the_merged_config(host, gpuhost_instance, config):
    if family(gpuhost_instance) != "debian12":
        pytest.skip("real containerd runs on the Debian host")
    plugin, expected = CONTAINERD_CASES[config]
    started = host.run("sh -c %s - %s" % (shlex.quote(START_CONTAINERD), config))
    assert started.rc == 0 and "Server:" in started.stdout, started.stdout + started.stderr
    text = host.file(config).content_string
    if plugin == "cri":  # version 1: the runtime is in the main config, no drop-in and no imports line
        parsed = tomllib.loads(text)
        assert parsed["version"] == 1 and "imports" not in parsed and parsed["disabled_plugins"] == ["cri"]
        assert not host.file("/etc/gpuhost-test/containerd-v1/conf.d/99-nvidia.toml").exists
        runtime = parsed["plugins"]["cri"]["containerd"]["runtimes"]["nvidia"]
        assert parsed["plugins"]["cri"]["enable_cdi"] is True
    else:
        dump = host.run("containerd --config %s config dump" % config)
        assert dump.rc == 0, dump.stderr
        runtime = tomllib.loads(dump.stdout)["plugins"][plugin]["containerd"]["runtimes"]["nvidia"]
    for key, value in expected.items():
        assert runtime[key] == value, (key, runtime)


# Real dockerd starts on the merged daemon.json with vfs storage and no iptables or bridge: Debian 12's own 20.10
# (the host's docker.io) and Debian 13's 26.1 (trixie's docker.io, extracted on the controller by prepare and copied
# in; it runs on bookworm's libraries). The script asks the daemon's API for /info (the 20.10 CLI drops fields it does
# not know, CDISpecDirs among them) and prints it as the last line.
START_DOCKERD = r"""
set -u
dockerd=$1 config=$2
dir=$(mktemp -d /tmp/gpuhost-dockerd.XXXXXX)
"$dockerd" --config-file "$config" --storage-driver vfs --iptables=false --ip-masq=false --bridge=none \
    --data-root "$dir/root" --exec-root "$dir/exec" --pidfile "$dir/pid" -H "unix://$dir/sock" >"$dir/log" 2>&1 &
pid=$!
python3 - "$dir/sock" "$pid" <<'PY'
import json, os, socket, sys, time
for _ in range(150):
    try:
        os.kill(int(sys.argv[2]), 0)
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(sys.argv[1])
        conn.sendall(b"GET /info HTTP/1.0\r\nHost: docker\r\n\r\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        if b" 200 " in head.split(b"\r\n", 1)[0]:
            print(json.dumps(json.loads(body)))
            sys.exit(0)
    except (OSError, ValueError):
        pass
    time.sleep(0.2)
sys.exit(1)
PY
rc=$?
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
[ "$rc" -eq 0 ] || cat "$dir/log"
rm -rf "$dir"
exit "$rc"
"""
TRIXIE_DOCKERD = "/usr/local/sbin/gpuhost-test-dockerd-trixie"


def dockerd_info(host, dockerd: str, config: str) -> dict:
    started = host.run("sh -c %s sh %s %s" % (shlex.quote(START_DOCKERD), shlex.quote(dockerd), shlex.quote(config)))
    assert started.rc == 0, started.stdout + started.stderr
    return json.loads(started.stdout.strip().splitlines()[-1])


def test_real_dockerd_starts_on_the_merged_daemon_json(host, gpuhost_instance):
    if family(gpuhost_instance) != "debian12":
        pytest.skip("real dockerd runs on the Debian host")
    info = dockerd_info(host, "dockerd", "/etc/docker/daemon.json")
    assert info["ServerVersion"].startswith("20.10."), info["ServerVersion"]
    assert info["Runtimes"]["nvidia"]["path"] == RUNTIME
    assert info["Runtimes"]["crun"]["path"] == "/usr/bin/crun"


def test_docker_26_lists_the_runtime_and_the_cdi_feature(host, gpuhost_instance):
    """Docker 25+ reads features.cdi: with it, /info (what `docker info` prints) names the CDI spec directories."""
    if family(gpuhost_instance) != "debian12":
        pytest.skip("real dockerd runs on the Debian host")
    assert DOCKERD.is_file(), f"{DOCKERD} is missing: prepare downloads Debian trixie's docker.io"
    subprocess.run(["podman", "cp", str(DOCKERD), f"{gpuhost_instance}:{TRIXIE_DOCKERD}"], check=True)
    info = dockerd_info(host, TRIXIE_DOCKERD, "/etc/docker/daemon.json")
    assert info["ServerVersion"].startswith("26.1."), info["ServerVersion"]
    assert info["Runtimes"]["nvidia"]["path"] == RUNTIME
    assert info["CDISpecDirs"] == ["/etc/cdi", "/var/run/cdi"]
    # the feature is what the role asked for: the same daemon.json without features.cdi reports no CDI directories
    without = {key: value for key, value in json.loads(host.file("/etc/docker/daemon.json").content_string).items()
               if key != "features"}
    host.run("cat > /tmp/gpuhost-daemon-nocdi.json <<'EOF'\n%s\nEOF" % json.dumps(without))
    assert dockerd_info(host, TRIXIE_DOCKERD, "/tmp/gpuhost-daemon-nocdi.json").get("CDISpecDirs") in ([], None)


def test_crio_dropin(host, gpuhost_instance):
    if "crio" not in EXPECTED[family(gpuhost_instance)][1]:
        pytest.skip("CRI-O is not configured here")
    dropin = tomllib.loads(host.file("/etc/crio/crio.conf.d/99-nvidia.conf").content_string)
    nvidia = {"runtime_path": RUNTIME, "runtime_type": "oci"}
    if family(gpuhost_instance) == "rocky9":  # inherited from the default runtime (crun) of prepare's crio.conf
        nvidia.update(runtime_root="/run/crun", monitor_path="/usr/libexec/crio/conmon")
    assert dropin == {"crio": {"runtime": {"runtimes": {"nvidia": nvidia}}}}


def test_toolkit_config_toml_holds_the_asked_keys(host, gpuhost_instance):
    path = "/etc/nvidia-container-runtime/config.toml"
    if family(gpuhost_instance) != "debian12":
        assert not host.file(path).exists or "gpuhost.nvidia" not in host.file(path).content_string
        return
    doc = tomllib.loads(host.file(path).content_string)
    assert doc == {"accept-nvidia-visible-devices-envvar-when-unprivileged": False,
                   "nvidia-container-runtime": {"mode": "auto"},
                   "features": {"ignore-imex-channel-requests": True}}
    record = json.loads(host.file("/var/lib/gpuhost/nvidia_container_toolkit_config.json").content_string)
    assert record[path]["original"] is None  # the stub package ships no config.toml: absent removes the file


def main_pid(host, unit: str) -> str:
    return host.run("systemctl show --property=MainPID --value %s" % unit).stdout.strip()


def test_restart_if_idle_restarts_an_idle_engine(host, gpuhost_instance):
    """Debian 12: the real containerd.service, whose configuration the role changed and in whose containers no GPU
    process runs (the host has no driver), was restarted: its main process is not the one prepare noted."""
    if family(gpuhost_instance) != "debian12":
        pytest.skip("the idle case runs on the Debian host, with Debian's real containerd")
    before = host.file("/var/lib/gpuhost-test/engine-before.pid").content_string.strip()
    assert before not in ("", "0") and host.service("containerd").is_running
    assert main_pid(host, "containerd.service") not in ("0", before)


def test_restart_if_idle_defers_while_a_gpu_container_runs(host, gpuhost_instance):
    """Rocky 9: a GPU process runs in a CRI-O container's cgroup, so the restart of crio.service (a stand-in) that the
    changed drop-in needs is deferred, reported as pending with the container named, in every run; crio.service still
    runs the main process prepare started."""
    if family(gpuhost_instance) != "rocky9":
        pytest.skip("the deferred case runs on the Rocky host")
    before = host.file("/var/lib/gpuhost-test/engine-before.pid").content_string.strip()
    assert before not in ("", "0") and main_pid(host, "crio.service") == before
    job = host.file("/var/lib/gpuhost-test/gpu-job.pid").content_string.strip()
    assert "crio-63425c4a8b42" in host.file("/proc/%s/cgroup" % job).content_string
    noted = json.loads(host.file("/var/lib/gpuhost-test/restart.json").content_string)
    assert noted["pending"] == ["crio.service"]
    assert noted["report"] == [
        "nvidia_container_toolkit: crio.service restart pending (restart policy if_idle): containers it would stop use "
        "the GPUs: crio container 63425c4a8b42 (sleep, pid %s, GPU 0). It was not restarted; the next run restarts it once "
        "they have stopped, or restart it yourself (systemctl restart crio.service), or set the restart policy to always." % job]


def test_cdi_spec_generated_valid_and_recorded(host, gpuhost_instance):
    fam = family(gpuhost_instance)
    # Toolkit 1.18+ (Debian's 1.18.0, Rocky's 1.20.0) ships nvidia-cdi-refresh: the spec goes where the service writes
    # it. Arch's 1.17.8 has no refresh units: /etc/cdi.
    spec_path, other = ("/var/run/cdi/nvidia.yaml", "/etc/cdi/nvidia.yaml") if fam != "arch" else \
        ("/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml")
    spec_text = host.file(spec_path).content_string
    spec = yaml.safe_load(spec_text)
    strategy = "uuid" if fam == "rocky9" else "index"
    assert f"device-name-strategy={strategy}" in spec_text  # the stub records the flag the role passed
    if not CDI_SCHEMA.is_file():
        pytest.skip(f"{CDI_SCHEMA} is absent: the CDI schema lives outside the repository")
    schema = json.loads(CDI_SCHEMA.read_text())
    resolver_base = CDI_SCHEMA.parent.as_uri() + "/"
    jsonschema.validate(spec, schema, resolver=jsonschema.RefResolver(resolver_base, schema))
    record = json.loads(host.file("/var/lib/gpuhost/nvidia_cdi_spec.json").content_string)
    assert record["spec"] == spec_path and record["generated"] is True
    assert record["generated_for"]["device_name_strategy"] == strategy
    assert record["generated_for"]["toolkit_version"] == EXPECTED[fam][0]
    assert not host.file(other).exists  # exactly one spec for the nvidia kind


def test_cdi_refresh_units_enabled_ordered_and_configured(host, gpuhost_instance):
    fam = family(gpuhost_instance)
    if fam == "arch":
        assert not host.file("/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env").exists
        pytest.skip("the toolkit here (1.17.8) has no nvidia-cdi-refresh units (pre-1.18 path)")
    for unit in ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service"):
        assert host.service(unit).is_enabled, unit
    assert host.service("nvidia-cdi-refresh.path").is_running
    env = host.file("/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env").content_string
    lines = [line for line in env.splitlines() if line and not line.startswith("#")]
    assert lines == ["NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml"] + (
        ["NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES=index", "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS=disable-nvsandboxutils"]
        if fam == "debian12" else ["NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES=uuid"])
    show = host.run("systemctl show -p After -p Before nvidia-cdi-refresh.service").stdout
    after = next(line for line in show.splitlines() if line.startswith("After="))
    before = next(line for line in show.splitlines() if line.startswith("Before="))
    assert "gpuhost-gpu-settings.service" in after
    for unit in ("containerd.service", "docker.service", "kubelet.service"):
        assert unit in before, (unit, before)


def test_node_labels_file(host, gpuhost_instance):
    # NFD's local feature directory, created by the role (no NFD in the test hosts).
    path = "/etc/kubernetes/node-feature-discovery/features.d/gpuhost-nvidia"
    assert host.file(path).mode == 0o644 and host.file(path).user == "root"
    labels = dict(line.split("=", 1) for line in host.file(path).content_string.splitlines()
                  if line and not line.startswith("#"))
    assert labels["gpuhost.nvidia/gpu.present"] == "false"  # no GPU in the test containers
    assert labels["gpuhost.nvidia/container-toolkit.version"] == EXPECTED[family(gpuhost_instance)][0]
    # GFD's labels describe GPUs NVML lists: none here, so none of them.
    assert not [key for key in labels if key.startswith("nvidia.com/")]


def test_bad_inputs_fail_before_any_change(host, gpuhost_instance):
    if family(gpuhost_instance) != "debian12":
        pytest.skip("the bad-input run targets the Debian host")
    broken_before = host.file("/etc/docker/broken-daemon.json").content_string
    result = run_playbook_json(str(SCENARIO / "bad_inputs.yml"))
    changed = [task["task"]["name"] for play in result["plays"] for task in play["tasks"]
               if task["hosts"].get(gpuhost_instance, {}).get("changed")]
    assert changed == []
    report = [task["hosts"][gpuhost_instance] for play in result["plays"] for task in play["tasks"]
              if task["task"]["name"] == "Report the failures"][0]["__ntk_errors"]
    assert "podman" in report["unknown_runtime"] and "docker, containerd, crio" in report["unknown_runtime"]
    assert "/etc/docker/broken-daemon.json is not valid JSON" in report["invalid_json"]
    assert "line 2 column 1" in report["invalid_json"] or "Expecting" in report["invalid_json"]
    assert "1.16.2 is not in the apt repository" in report["missing_version"]
    assert "offers 1.17.8, 1.18.0" in report["missing_version"]
    assert "1.17.7 lacks the fixes of CVE-2025-23266" in report["cve_floor"]
    assert "nvidia_container_toolkit_accept_cves: [CVE-2025-23266]" in report["cve_floor"]
    assert "1.11.0 is too old for CDI" in report["cdi_too_old"]
    assert "nvidia_container_toolkit_node_labels_file: 'etc/node-labels' is not an absolute path" in report["relative_labels"]
    assert "nvidia_container_toolkit_cdi_refresh_before[0]: 'docker.service\\n' holds the control character" in report["unit_newline"]
    assert host.file("/etc/docker/broken-daemon.json").content_string == broken_before

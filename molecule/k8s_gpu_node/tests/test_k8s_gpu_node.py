"""k8s_gpu_node on Debian 12 with Debian's real containerd, and a k3s agent's file layout: see molecule.yml. The fast
path and drift test runs after the tests of the converged state, and the state absent test runs last."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from gpuhost_testinfra import (  # noqa: F401  pylint: disable=unused-import
    changed_tasks,
    run_playbook_json,
    test_check_after_converge_changes_nothing,
    test_check_mode_predicted_converge,
)

SCENARIO = Path(__file__).resolve().parents[1]
FEATURES = "/etc/kubernetes/node-feature-discovery/features.d/gpuhost-k8s-gpu-node"
UNIT = "gpuhost-k8s-node-labels.service"
DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"
RECORD = "/var/lib/gpuhost/converged/k8s_gpu_node.json"
# The converged probe and record, as the internal common role's probe.yml and record.yml name them.
PROBE_TASK = "gpuhost.nvidia.internal_common : Ask whether the host is as the calling role's last full run left it"
RECORD_TASK = "gpuhost.nvidia.internal_common : Write what the calling role's full run left, or remove its record"
# The shared Molecule configuration asks every role for its full path (gpuhost_converged_full_run, for idempotence):
# these runs are the ones a user makes, with the fast path.
FAST = ("-e", "gpuhost_converged_full_run=false")
HEADER = "# Written by gpuhost.nvidia.k8s_gpu_node from the GPU facts; refreshed at boot by gpuhost-k8s-node-labels.service."


K3S_DIR = "/var/lib/rancher/k3s/agent/etc/containerd"
K3S_TEMPLATE = K3S_DIR + "/config-v3.toml.tmpl"
# What the role writes on the k3s host (module_utils/_k8s_rancher.py): the base, then the runtime k3s does not add.
K3S_TEMPLATE_TEXT = """# Written by gpuhost.nvidia.k8s_gpu_node: k3s's base template, then the runtime the role adds; state absent removes this file.
{{ template "base" . }}

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-gpuhost]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-gpuhost.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
  SystemdCgroup = {{ .SystemdCgroup }}
"""


def is_image(name: str) -> bool:
    return "-image-" in name


def is_k3s(name: str) -> bool:
    return "-k3s-" in name


def test_k3s_template_extends_the_base(host, gpuhost_instance):
    if not is_k3s(gpuhost_instance):
        assert not host.file("/var/lib/rancher").exists
        return
    template = host.file(K3S_TEMPLATE)
    assert template.is_file and template.mode == 0o600 and template.user == "root"
    assert template.content_string == K3S_TEMPLATE_TEXT
    assert not host.file(K3S_DIR + "/config.toml.tmpl").exists
    # k3s's rendered file, with the template's base filled in by hand (no k3s here): containerd would get valid TOML
    # with k3s's own tables and the runtime.
    rendered = host.file(K3S_DIR + "/config.toml").content_string
    merged = tomllib.loads(K3S_TEMPLATE_TEXT.replace('{{ template "base" . }}', rendered).replace("{{ .SystemdCgroup }}", "true"))
    runtimes = merged["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
    assert set(runtimes) == {"runc", "nvidia-gpuhost"}
    assert runtimes["nvidia-gpuhost"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    # k3s owns config.toml, and the kubeadm files are not k3s's: the role changed none of them.
    check = host.run("sha256sum -c /root/k8s-baseline.sha256")
    assert check.rc == 0, check.stdout + check.stderr
    assert not host.file("/etc/containerd/conf.d/99-nvidia.toml").exists


def test_containerd_runs_on_the_merged_config_with_cdi(host, gpuhost_instance):
    if is_k3s(gpuhost_instance):
        return  # no containerd of its own: test_k3s_template_extends_the_base
    if is_image(gpuhost_instance):
        assert not host.service("containerd").is_running, "the image build must not start containerd"
        assert host.service("containerd").is_enabled
    else:
        assert host.service("containerd").is_running
    # containerd's effective configuration: the main config with its imports, as containerd itself merges them.
    dump = host.run("containerd --config /etc/containerd/config.toml config dump")
    assert dump.rc == 0, dump.stderr
    merged = tomllib.loads(dump.stdout)
    cri = merged["plugins"]["io.containerd.grpc.v1.cri"]
    dropin = tomllib.loads(host.file("/etc/containerd/conf.d/99-nvidia.toml").content_string)
    assert dropin["plugins"]["io.containerd.grpc.v1.cri"]["enable_cdi"] is True
    version = host.run("containerd --version").stdout.split()[2]
    if tuple(int(p) for p in version.lstrip("v").split(".")[:2]) >= (1, 7):
        # containerd 1.7 added CDI to its CRI plugin (docs/sources.md): Debian 13's 1.7 has it on.
        assert cri["enable_cdi"] is True
        assert cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    else:
        # Debian 12's containerd 1.6 predates CDI: it starts on the key and ignores it (docs/kubernetes.md says so).
        assert "enable_cdi" not in cri
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    # Inherited from the user's runc, and nvidia is not the default (pods ask for it with runtimeClassName: nvidia).
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True
    assert cri["containerd"]["default_runtime_name"] == "runc"
    # The user's own import and key stay.
    assert "/etc/containerd/site.toml" in merged["imports"]
    assert merged["debug"]["level"] == "info"
    main = host.file("/etc/containerd/config.toml").content_string
    assert main.startswith("# site containerd config\nversion = 2\n")


def test_containerd_restarted_only_on_the_worker(host, gpuhost_instance):
    if is_k3s(gpuhost_instance):
        return
    if is_image(gpuhost_instance):
        assert host.run("systemctl show -p ActiveState --value containerd").stdout.strip() == "inactive"
        return
    started = host.run("systemctl show -p ExecMainStartTimestampMonotonic --value containerd").stdout.strip()
    dropin = host.run("stat -c %Y /etc/containerd/conf.d/99-nvidia.toml").stdout.strip()
    boot = host.run("cat /proc/uptime").stdout.split()[0]
    assert int(started) > 0
    # containerd's process started after its drop-in was written (a restart that took the new config).
    now = int(host.run("date +%s").stdout.strip())
    started_wall = now - float(boot) + int(started) / 1e6
    assert started_wall >= int(dropin) - 1


def test_kubelet_flags(host, gpuhost_instance):
    text = host.file("/etc/default/kubelet").content_string
    if is_k3s(gpuhost_instance):
        assert text == "# site kubelet flags\nKUBELET_EXTRA_ARGS=\"--max-pods=64\"\n"  # k3s's kubelet does not read it
        return
    assert "# site kubelet flags\n" in text
    line = [ln for ln in text.splitlines() if ln.startswith("KUBELET_EXTRA_ARGS=")]
    assert len(line) == 1
    words = line[0].split("=", 1)[1].strip('"').split()
    assert "--max-pods=64" in words
    labels = [w.split("=", 1)[1] for w in words if w.startswith("--node-labels=")]
    taints = [w.split("=", 1)[1] for w in words if w.startswith("--register-with-taints=")]
    assert len(labels) == 1 and len(taints) == 1
    model = "a100" if is_image(gpuhost_instance) else "v100"
    expected = {"accelerator": "nvidia-tesla-" + model, "nvidia.com/gpu": "true"}
    if not is_image(gpuhost_instance):
        expected["example.com/gpu-pool"] = "training"
    assert dict(item.split("=", 1) for item in labels[0].split(",")) == expected
    assert taints[0].split(",") == ["nvidia.com/gpu=true:NoSchedule"]


def test_features_file_and_boot_unit(host, gpuhost_instance):
    unit = host.file("/etc/systemd/system/" + UNIT)
    assert unit.exists
    assert host.run("systemctl is-enabled " + UNIT).stdout.strip() == "enabled"
    # Enabled, never started by the role (no GPU here: its condition, nvidia-smi, does not hold either).
    assert host.run("systemctl show -p ActiveState --value " + UNIT).stdout.strip() == "inactive"
    verify = host.run("systemd-analyze verify /etc/systemd/system/" + UNIT)
    assert "gpuhost-k8s-node-labels" not in verify.stderr.replace(UNIT + ":", ""), verify.stderr
    script = host.file("/usr/local/lib/gpuhost/k8s_gpu_node/k8s-node-labels")
    assert script.mode == 0o644  # read by the interpreter the unit names, not executed itself
    lib = "/usr/local/lib/gpuhost/k8s_gpu_node/ansible_collections/gpuhost/nvidia/plugins/module_utils"
    # The copied library imports on the host's own Python, without Ansible.
    probe = host.run("python3 -B -c 'import sys; sys.path.insert(0, \"/usr/local/lib/gpuhost/k8s_gpu_node\"); "
                     "from ansible_collections.gpuhost.nvidia.plugins.module_utils import _labels, _smi; print(\"ok\")'")
    assert probe.rc == 0 and probe.stdout.strip() == "ok", probe.stderr
    assert host.file(lib + "/_labels.py").exists
    # Without nvidia-smi, the script fails and leaves the feature file as it is.
    run = host.run("python3 -B /usr/local/lib/gpuhost/k8s_gpu_node/k8s-node-labels --lib /usr/local/lib/gpuhost/k8s_gpu_node "
                   "--out /tmp/k8s-labels-probe --nvidia-smi /nonexistent/nvidia-smi")
    assert run.rc == 1 and "left as it is" in run.stderr
    assert not host.file("/tmp/k8s-labels-probe").exists
    features = host.file(FEATURES)
    if is_image(gpuhost_instance):
        assert not features.exists, "a node image gets its labels on first boot"
        return
    assert features.content_string == HEADER + "\ngpuhost.nvidia/gpu.present=false\n"


def _task_results(run: dict, instance: str, suffix: str) -> list[dict]:
    return [t["hosts"][instance] for p in run["plays"] for t in p["tasks"]
            if t["task"]["name"].endswith(suffix) and instance in t["hosts"] and not t["hosts"][instance].get("skipped")]


def _converge_fast(instance: str) -> dict:
    run = run_playbook_json(str(SCENARIO / "converge.yml"), *FAST, limit=instance)
    assert run["stats"][instance]["failures"] == 0, run
    return run


def test_fast_path_sees_an_edited_file_and_one_run_repairs_it(host, gpuhost_instance):
    """After idempotence (a full run that confirmed the record), a re-run ends at the probe and changes nothing. A
    managed file edited behind the role's back is drift: the next run takes the full path and repairs it, and the run
    after that takes the fast path again. Worker and image: the nvidia runtime's binary in containerd's drop-in; k3s
    (no drop-in of the role's there): the feature file."""
    record = json.loads(host.file(RECORD).content_string)
    # The report may be empty (Debian 13's containerd 1.7 has CDI, and nothing was restarted): recorded all the same.
    assert record["confirmed"] and isinstance(record["outputs"]["k8s_gpu_node_report"], list), record
    fast = _converge_fast(gpuhost_instance)
    probes = _task_results(fast, gpuhost_instance, PROBE_TASK)
    assert [p["converged"] for p in probes] == [True], probes
    assert _task_results(fast, gpuhost_instance, RECORD_TASK) == [] and changed_tasks(fast, gpuhost_instance) == []

    path = FEATURES if is_k3s(gpuhost_instance) else DROPIN
    before = host.file(path).content_string
    if path == DROPIN:
        host.check_output("sed -i 's#/usr/bin/nvidia-container-runtime#/usr/bin/false#' %s", DROPIN)
    else:
        host.check_output("printf '\\n# gpuhost drift test\\n' >> %s", path)
    assert host.file(path).content_string != before
    repair = _converge_fast(gpuhost_instance)
    probes = _task_results(repair, gpuhost_instance, PROBE_TASK)
    assert [p["converged"] for p in probes] == [False], probes
    assert any(d.startswith(f"file {path} changed") for d in probes[0]["drift"]), probes[0]["drift"]
    assert host.file(path).content_string == before
    repaired = [name for name in changed_tasks(repair, gpuhost_instance) if not name.endswith(RECORD_TASK)]
    assert repaired, changed_tasks(repair, gpuhost_instance)

    again = _converge_fast(gpuhost_instance)
    assert [p["converged"] for p in _task_results(again, gpuhost_instance, PROBE_TASK)] == [True]
    assert changed_tasks(again, gpuhost_instance) == []


def test_the_question_before_the_role_answers_as_the_role(gpuhost_instance, tmp_path):
    """site.yml asks before each recording role, on the controller, whether the role's record holds (gpuhost_converged
    with role:, from the run's one observation), and ends the role's play where it does. Here the role ran on its own
    (converge.yml), so its record's inputs digest is the role's own probe's: the question, outside the role, computes the
    same digest, node labels (a filter of the collection) included, and answers converged without asking the host."""
    plays = [{"hosts": gpuhost_instance, "gather_facts": False, "tasks": [
        {"name": "Observe", "gpuhost.nvidia.gpuhost_converged": {"state": "observe", "gpu_facts": True, "host_facts": True},
         "register": "gpuhost_converged_observation"},
        {"name": "Ask before the role", "gpuhost.nvidia.gpuhost_converged": {"state": "probe", "role": "k8s_gpu_node"}}]}]
    path = tmp_path / "before.json"
    path.write_text(json.dumps(plays), encoding="utf-8")
    run = run_playbook_json(str(path), *FAST, limit=gpuhost_instance)
    assert run["stats"][gpuhost_instance]["failures"] == 0, run
    answer = run["plays"][0]["tasks"][1]["hosts"][gpuhost_instance]
    assert answer["converged"] and answer["role"] == "k8s_gpu_node" and answer["drift"] == [], answer
    assert "k8s_gpu_node_report" in answer["outputs"], answer


def test_state_absent_restores_the_files(host, gpuhost_instance):
    if is_image(gpuhost_instance):
        return
    first = run_playbook_json(str(SCENARIO / "absent.yml"), limit=gpuhost_instance)
    assert first["stats"][gpuhost_instance]["failures"] == 0, first
    assert changed_tasks(first, gpuhost_instance), "the first removal changes something"
    second = run_playbook_json(str(SCENARIO / "absent.yml"), limit=gpuhost_instance)
    assert second["stats"][gpuhost_instance]["failures"] == 0, second
    assert changed_tasks(second, gpuhost_instance) == []
    check = host.run("sha256sum -c /root/k8s-baseline.sha256")
    assert check.rc == 0, check.stdout + check.stderr
    assert not host.file(RECORD).exists, "state absent removes the converged record"
    if is_k3s(gpuhost_instance):
        assert not host.file(K3S_TEMPLATE).exists
        assert host.file(K3S_DIR).is_directory and host.file(K3S_DIR + "/config.toml").exists
        assert not host.file(FEATURES).exists
        return
    for path in ("/etc/containerd/conf.d/99-nvidia.toml", FEATURES, "/etc/systemd/system/" + UNIT,
                 "/usr/local/lib/gpuhost/k8s_gpu_node/k8s-node-labels", "/usr/local/lib/gpuhost/k8s_gpu_node"):
        assert not host.file(path).exists, path
    assert host.service("containerd").is_running
    dump = tomllib.loads(host.run("containerd --config /etc/containerd/config.toml config dump").stdout)
    assert "nvidia" not in dump["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]

# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Each role's first check of the variables that reach files, units and commands, run as the role runs: the whole
role (include_role, main.yml) on the controller in check mode, one host per hostile case. The check fails naming the
variable and the value, and no task of the role after it runs: nothing is read from the host (GPU facts, the fast
path's probe) and nothing is changed, in check mode as it would be for real. The rules themselves are tested value by
value in tests/unit/common/test_role_inputs.py."""

from __future__ import annotations

import os
import typing as t

import pytest

from systemd_words import systemd_split  # tests/unit/fakes, on the path by conftest.py

# Tasks that may run before the check: the role's argument spec validation and its per-distribution variables.
BEFORE_OK = ("Gathering Facts", "Load the distribution's package names", "Validating arguments against arg spec",
             "Set the per-distribution variables", "Ensure the facts used by the role",
             "Set the variables that differ for this release",
             # nvidia_container_toolkit's include of its check file (tasks/check.yml).
             "Check the request and the values that reach files and units, before changing anything")

CASES: dict[str, dict[str, dict[str, t.Any]]] = {
    "gpu_exporter": {
        "listen-newline": {"gpu_exporter_listen_address": "0.0.0.0:9400\nExecStartPre=/bin/sh -c id"},
        "listen-flag": {"gpu_exporter_listen_address": "0.0.0.0 --collectors /etc/shadow"},
        "listen-port-inside": {"gpu_exporter_listen_address": "0.0.0.0:9400"},
        "port-negative": {"gpu_exporter_port": -1},
        "port-huge": {"gpu_exporter_port": 70000},
        "port-bool": {"gpu_exporter_port": True},
        "hostengine-space": {"gpu_exporter_dcgm_hostengine": "localhost:5555 -f /tmp/x"},
        "hostengine-port": {"gpu_exporter_dcgm_hostengine": "localhost:99999"},
        "collector-newline": {"gpu_exporter_dcgm_collectors": [{"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge",
                                                                "help": "t\nDCGM_FI_DEV_X, gauge, x"}]},
        "sha-required": {"gpu_exporter_kind": "nvidia_gpu_exporter"},
        "version-traversal": {"gpu_exporter_nvidia_gpu_exporter_version": "1.3.1/../../../etc"},
    },
    "nvidia_container_toolkit": {
        "labels-relative": {"nvidia_container_toolkit_node_labels_file": "etc/node-labels"},
        "labels-traversal": {"nvidia_container_toolkit_node_labels_file": "/etc/kubernetes/../../root/.bashrc"},
        "labels-relative-absent": {"nvidia_container_toolkit_node_labels_file": "labels.txt", "nvidia_container_toolkit_state": "absent"},
        "unit-newline": {"nvidia_container_toolkit_cdi_refresh_after": ["docker.service\nExecStartPre=/bin/sh"]},
        "unit-trailing-newline": {"nvidia_container_toolkit_cdi_refresh_before": ["docker.service\n"]},
        "daemon-json-relative": {"nvidia_container_toolkit_docker_daemon_json": "daemon.json"},
    },
    "nvidia_driver": {
        "extra-option": {"nvidia_driver_packages_extra": ["--allow-unauthenticated"]},
        "extra-space": {"nvidia_driver_packages_extra": ["nvidia-smi evil"]},
        "extra-newline": {"nvidia_driver_packages_extra": ["nvidia-smi\n"]},
        "repo-newline": {"nvidia_driver_repo_url": "https://example.invalid/repo\nSigned-By: /tmp/k"},
        "mok-relative": {"nvidia_driver_mok_key": "mok.key", "nvidia_driver_state": "absent"},
        "timeout-zero": {"nvidia_driver_reboot_timeout": 0},
    },
    "gpu_verify": {
        "image-flag": {"gpu_verify_image": "nvidia/cuda --privileged"},
        "host-newline": {"gpu_verify_docker_host": "unix:///var/run/docker.sock\nx"},
        "timeout-zero": {"gpu_verify_timeout": 0},
    },
    "gpu_compose": {
        "project-relative": {"gpu_compose_projects": [{"path": "srv/app", "services": [{"name": "app"}]}]},
        "override-traversal": {"gpu_compose_override_name": "../../etc/cron.d/x.yml"},
        "owner-shell": {"gpu_compose_owner": "root;id"},
    },
    "vfio_passthrough": {
        "address-newline": {"vfio_passthrough_pci_addresses": ["0000:01:00.0\ninstall vfio-pci /bin/sh"]},
        "id-glob": {"vfio_passthrough_device_ids": ["10de:*"]},
    },
    "gpu_doctor": {
        "report-relative": {"gpu_doctor_report_dir": "reports"},
        "cdi-dir-traversal": {"gpu_doctor_cdi_dirs": ["/etc/cdi/../../root"]},
    },
    "k8s_gpu_node": {
        "features-specifier": {"k8s_gpu_node_features_file": "/etc/kubernetes/node-feature-discovery/features.d/%n"},
        "interpreter-words": {"k8s_gpu_node_python_interpreter": "/usr/bin/python3 -c import"},
        "kubelet-env-relative": {"k8s_gpu_node_kubelet_env_file": "etc/default/kubelet", "k8s_gpu_node_state": "absent"},
        "accelerator-flag": {"k8s_gpu_node_accelerator": "a100 --node-labels=node-role.kubernetes.io/control-plane="},
    },
    "gpu_settings": {
        "packages-option": {"gpu_settings_packages": ["-oDebug::pkgProblemResolver=1"]},
        "interpreter-words": {"gpu_settings_python_interpreter": "/usr/bin/python3 -c import"},
        "spec-path-specifier": {"gpu_settings_spec_path": "/etc/gpuhost/%n.json"},
    },
}
CHECKS = {
    "gpu_exporter": "Check the variables that reach the unit, the files and the commands, before changing anything",
    "nvidia_container_toolkit": "Fail on an unsupported distribution or a bad request, before changing anything",
    "nvidia_driver": "Check the variables that reach the files and the commands, before changing anything",
    "gpu_verify": "Check the variables that reach the files and the commands, before changing anything",
    "gpu_compose": "Check the variables that reach the files and the commands, before changing anything",
    "vfio_passthrough": "Check the variables that reach the files and the commands, before changing anything",
    "gpu_doctor": "Check the variables that reach the files and the commands, before changing anything",
    "k8s_gpu_node": "Fail on a bad request, before changing anything",
    "gpu_settings": "Check the spec and the values that the boot unit and the package names are built from, before changing anything",
}


@pytest.mark.parametrize("role", sorted(CASES))
def test_the_first_check_refuses_and_nothing_after_it_runs(local_play, role) -> None:
    fqcn = "gpuhost.nvidia." + role
    plays = [{"hosts": "all", "gather_facts": True, "gather_subset": ["min"],
              "tasks": [{"name": "Run the role", "ansible.builtin.include_role": {"name": fqcn}}]}]
    results = local_play(plays, hosts=CASES[role])
    for case, variables in CASES[role].items():
        tasks = results[case]
        check = "%s : %s" % (fqcn, CHECKS[role])
        assert check in tasks, (case, list(tasks))
        assert tasks[check].get("failed"), (case, tasks[check])
        message = tasks[check]["msg"]
        for name in variables:
            if name.endswith("_state") or name.endswith("_kind"):
                continue
            assert name in message, (case, name, message)
        assert "\n" not in message and ("Nothing was changed." in message or "Nothing was read or written." in message), (case, message)
        names = list(tasks)
        after = names[names.index(check) + 1:]
        assert after == [], (case, after)
        before = [n for n in names[:names.index(check)] if n != "Run the role"]
        assert all(any(ok in n for ok in BEFORE_OK) for n in before), (case, before)
        assert not any(tasks[n].get("changed") for n in names), (case, names)


def test_the_defaults_pass_the_first_check(local_play, tmp_path) -> None:
    """The task's mapping as the role renders it (templated defaults, the trimmed URL) passes; the role goes on."""
    root = tmp_path / "root"
    root.mkdir()
    plays = [{"hosts": "all", "gather_facts": True, "gather_subset": ["min"], "tasks": [
        {"name": "Run the exporter role", "ansible.builtin.include_role": {"name": "gpuhost.nvidia.gpu_exporter"},
         "when": "inventory_hostname == 'exporter'"},
        {"name": "Run the driver role", "ansible.builtin.include_role": {"name": "gpuhost.nvidia.nvidia_driver"},
         "when": "inventory_hostname == 'driver'"}]}]
    hosts = {"exporter": {"gpu_exporter_facts": {"gpus": []}, "gpu_exporter_fast_path": False, "gpu_exporter_kind": "dcgm",
                          "gpu_exporter_verify": False, "gpu_exporter_facts_root": str(root)},
             "driver": {"nvidia_driver_facts_root": str(root), "nvidia_driver_fast_path": False}}
    results = local_play(plays, hosts=hosts)
    for host, role in (("exporter", "gpu_exporter"), ("driver", "nvidia_driver")):
        check = results[host]["gpuhost.nvidia.%s : %s" % (role, CHECKS[role])]
        assert check.get("skipped") and not check.get("failed"), (host, check)
        names = list(results[host])
        assert len(names) > names.index("gpuhost.nvidia.%s : %s" % (role, CHECKS[role])) + 1, (host, names)


REPOSITORY = {"internal_repository_pkg_mgr": "apt", "internal_repository_url": "https://example.invalid/repo/",
              "internal_repository_key_url": "https://example.invalid/repo/key.pub",
              "internal_repository_key_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
              "internal_repository_keyring": "/etc/apt/keyrings/example.gpg", "internal_repository_file": "/etc/apt/sources.list.d/example.sources",
              "internal_repository_description": "Example"}
REPOSITORY_CASES = {
    "url-newline": {"internal_repository_url": "https://example.invalid/repo/\nTrusted: yes"},
    "url-space": {"internal_repository_url": "https://example.invalid/repo/ stable"},
    "suite-field": {"internal_repository_suites": "/\nSigned-By: /tmp/evil.gpg"},
    "component-space": {"internal_repository_components": ["main contrib"]},
    "keyring-relative": {"internal_repository_keyring": "keys/example.gpg"},
    "versions-option": {"internal_repository_versions_of": ["-o=Debug::NoLocking=1"]},
}


def test_the_internal_repository_refuses_before_fetching_or_writing(local_play) -> None:
    fqcn = "gpuhost.nvidia.internal_repository"
    check = fqcn + " : Refuse a repository without a key URL or a pinned fingerprint, or with a value its file cannot take"
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Run the role", "ansible.builtin.include_role": {"name": fqcn, "tasks_from": "repository.yml"}}]}]
    # Host variables (play variables would take precedence over the case's). The role is internal: a play includes it
    # here as if a collection role did (the name include_role gives a role's tasks), and once without that, which the
    # guard refuses before anything else, naming the caller.
    caller = {"ansible_parent_role_names": ["gpuhost.nvidia.nvidia_driver"]}
    hosts = {case: dict(REPOSITORY, **caller, **variables) for case, variables in REPOSITORY_CASES.items()}
    hosts["no-collection-role"] = dict(REPOSITORY)
    hosts["another-collections-role"] = dict(REPOSITORY, ansible_parent_role_names=["other.collection.nvidia_driver"])
    results = local_play(plays, hosts=hosts)
    for case, by in (("no-collection-role", "a play or a playbook task"), ("another-collections-role", "role other.collection.nvidia_driver")):
        tasks = results[case]
        assert tasks[check].get("failed") and "internal to the collection" in tasks[check]["msg"], (case, tasks[check])
        assert "not by " + by in tasks[check]["msg"], (case, tasks[check]["msg"])
        names = list(tasks)
        assert names[names.index(check) + 1:] == [] and not any(tasks[n].get("changed") for n in names), (case, names)
    for case, variables in REPOSITORY_CASES.items():
        tasks = results[case]
        assert tasks[check].get("failed"), (case, tasks[check])
        assert next(iter(variables)) in tasks[check]["msg"] and "Nothing was installed." in tasks[check]["msg"], (case, tasks[check]["msg"])
        names = list(tasks)
        assert names[names.index(check) + 1:] == [], (case, names)
        assert not any(tasks[n].get("changed") for n in names), (case, names)


def test_the_exporter_unit_keeps_each_value_one_argument_even_past_the_check(local_play) -> None:
    """The unit template alone, rendered with values the first task would refuse: each stays one argument of
    ExecStart= by systemd's parsing rules (tests/unit/fakes/systemd_words.py), and a line break
    fails the rendering instead of adding a line."""
    template = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "gpu_exporter", "templates",
                            "gpuhost-gpu-exporter.service.j2")
    engines = {"plain": "localhost:5555", "words": "localhost:5555 -f /etc/shadow", "expansions": 'a$HOME%n"q\\b',
               "newline": "localhost:5555\nExecStartPre=/bin/sh"}
    hosts = {name: {"gpu_exporter_dcgm_hostengine": value, "__gpu_exporter_kind": "dcgm", "__gpu_exporter_port": 9400,
                    "gpu_exporter_listen_address": "::", "__gpu_exporter_config_dir": "/etc/gpuhost-gpu-exporter",
                    "__gpu_exporter_dcgm_hostengine_service": "nvidia-dcgm.service",
                    "__gpu_exporter_listen": "{{ ('[' ~ gpu_exporter_listen_address ~ ']' if ':' in gpu_exporter_listen_address else "
                                             "gpu_exporter_listen_address) ~ ':' ~ __gpu_exporter_port }}"}
             for name, value in engines.items()}
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Render", "ansible.builtin.set_fact": {"unit": "{{ lookup('ansible.builtin.template', '%s') }}" % template}}]}]
    results = local_play(plays, hosts=hosts)
    for name, value in engines.items():
        render = results[name]["Render"]
        if name == "newline":
            assert render.get("failed") and "systemd_quote" in render["msg"], render
            continue
        line = [x for x in render["ansible_facts"]["unit"].splitlines() if x.startswith("ExecStart=")][0]
        words = systemd_split(line[len("ExecStart="):])
        assert words == ["/usr/bin/dcgm-exporter", "-a", "[::]:9400", "-f", "/etc/gpuhost-gpu-exporter/dcgm-collectors.csv",
                         "-r", value], (name, line)

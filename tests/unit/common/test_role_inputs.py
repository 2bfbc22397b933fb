# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The role variables that reach files, units and commands (plugins/module_utils/_role_inputs.py): each rule against
each class of hostile value, every role's table against its defaults, and the ExecStart= quoting against systemd's
own parser rules."""

from __future__ import annotations

import os
import re

import pytest
import yaml

import hostile
from systemd_words import systemd_split

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _role_inputs as r

ROLES_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles")

# Values no rule of this file accepts: control characters (a newline adds a line to a unit or a sources file),
# whitespace (a space adds a word), non-ASCII look-alikes, empty, huge.
COMMON = hostile.text_classes("control", "whitespace", "non_ascii", "empty", "huge")
WRONG_TYPES = [True, False, 1.5, [], {}, ["a"]]

HOSTS_GOOD = ["0.0.0.0", "127.0.0.1", "::", "::1", "fe80::1", "2001:db8::5", "localhost", "gpu-01", "gpu01.example.com",
              "a" * 63 + ".example", "xn--bcher-kva.example", "host.example.", "1host", "10.0.0.1"]
HOSTS_BAD = [value for _id, value in COMMON] + [
    "0.0.0.0:9400", "[::1]", "::1%eth0", "fe80::1%1", "256.1.1.1", "1.2.3", "999", "1.2.3.4.5", "-gpu", "gpu-", "gpu..x",
    ".gpu", "gpu_01", "a" * 64 + ".example", ("a" * 60 + ".") * 5 + "com", "gpu;reboot", "$(reboot)", "gpu -a 1.2.3.4",
    "0.0.0.0\nExecStartPre=/bin/sh", "gpu\r", "http://gpu", "gpu/x", "*.example", "ex\u0430mple.com", "0x7f.1", "1.2.3.4 "]
PORTS_GOOD = [1, 80, 9400, 65535, "1", "9400", "65535"]
PORTS_BAD = [0, -1, 65536, 70000, 10 ** 20, True, False, 9400.0, "0", "-1", "65536", "70000", "", " 80", "80 ", "80\n",
             "80 --flag", "+80", "0x50", "1e3", "09400", "\uff18\uff10", "٨٠", "80;reboot", [80], {"port": 80}]
HOSTPORTS_GOOD = ["localhost:5555", "localhost", "127.0.0.1:5555", "[::1]:5555", "::1", "dcgm.example:1", "10.1.2.3"]
HOSTPORTS_BAD = [value for _id, value in COMMON] + [
    "localhost:", "localhost:0", "localhost:70000", "localhost:-1", "localhost:55 55", ":5555", "[::1]", "[::1]5555",
    "[::1]:", "[localhost]:5555", "::1:5555x", "localhost:5555:1", "[::1:5555", "localhost:5555\n-f /etc/shadow",
    "localhost:5555 -r evil", "loc$host:5555", "local host:5555", 5555, True, ["localhost"]]
UNITS_GOOD = ["docker.service", "nvidia-persistenced.service", "multi-user.target", "getty@tty1.service",
              "container@.service", "dev-nvidia0.device", "sys-kernel.mount", "a:b_c.socket", "x.timer", "system.slice"]
UNITS_BAD = [value for _id, value in COMMON] + [
    "docker", "docker.", ".service", "docker.servic", "docker.service\n", "docker.service\nExecStartPre=/bin/sh",
    "docker.service; rm -rf /", "docker.service other.service", "docker service", "d$ocker.service", "d%i.service",
    "dev-disk-by\\x2duuid.device", "-docker.service", "@docker.service", "docker.SERVICE", "docker.service.d",
    "a" * 250 + ".service", "docker.service\x00", "\u0434ocker.service", "docker.service ", 1, True, ["docker.service"]]
PACKAGES = {
    "apt": (["libnvidia-ml1", "g++", "nvidia-driver", "python3.11", "libc6", "cuda-toolkit-12-4", "nvidia-utils-580=580.*",
             "nvidia-driver=580.95.05-1", "ab"],
            ["a", "Nvidia", "-nvidia", ".x", "+x", "nvidia_driver", "nvidia driver", "nvidia\n", "nvidia;reboot", "nvidia*",
             "nvidia:amd64", "nvidia=", "nvidia=1 2", "nvidia=1;x", "-o=APT::Get::AllowUnauthenticated=1",
             "--allow-unauthenticated", "$(reboot)", "caf\u00e9", "x" * 129]),
    "dnf": (["NetworkManager", "kmod-nvidia", "nvidia_driver", "python3-dnf-plugin-versionlock", "g++", "x"],
            ["-nvidia", ".x", "nvidia driver", "nvidia\n", "nvidia;reboot", "nvidia*", "nvidia=580", "@group", "nvidia/x",
             "--nogpgcheck", "$(reboot)", "x" * 129, "nvid\u0131a"]),
    "pacman": (["nvidia-utils", "lib32-nvidia-utils", "nvidia-open-dkms", "python@3", "a_b", "g++"],
               ["-nvidia", ".x", "nvidia utils", "nvidia\n", "nvidia;reboot", "nvidia=580", "nvidia/x", "--noconfirm",
                "$(reboot)", "nvidia*", "x" * 129]),
}


@pytest.mark.parametrize("value", HOSTS_GOOD)
def test_hosts_accepted(value):
    assert r.Host().errors("opt", value) == []


@pytest.mark.parametrize("value", HOSTS_BAD + WRONG_TYPES)
def test_hosts_refused_naming_the_option_and_value(value):
    errors = r.Host().errors("gpu_exporter_listen_address", value)
    assert len(errors) == 1
    assert str(errors[0]).startswith("gpu_exporter_listen_address: " + hostile.shown(value)), str(errors[0])


@pytest.mark.parametrize("value", PORTS_GOOD)
def test_ports_accepted(value):
    assert r.Port().errors("opt", value) == []


@pytest.mark.parametrize("value", PORTS_BAD)
def test_ports_refused(value):
    errors = r.Port().errors("gpu_exporter_port", value)
    assert len(errors) == 1 and "gpu_exporter_port: " in str(errors[0]) and "port number 1-65535" in str(errors[0])


@pytest.mark.parametrize("value", HOSTPORTS_GOOD)
def test_host_ports_accepted(value):
    assert r.HostPort().errors("opt", value) == []


@pytest.mark.parametrize("value", HOSTPORTS_BAD)
def test_host_ports_refused(value):
    errors = r.HostPort().errors("gpu_exporter_dcgm_hostengine", value)
    assert len(errors) == 1 and str(errors[0]).startswith("gpu_exporter_dcgm_hostengine: "), errors


def test_a_port_can_be_required():
    assert r.HostPort(port_optional=False).errors("o", "localhost")
    assert r.HostPort(port_optional=False).errors("o", "::1")
    assert not r.HostPort(port_optional=False).errors("o", "[::1]:1")


@pytest.mark.parametrize("value", UNITS_GOOD)
def test_unit_names_accepted(value):
    assert r.UnitName().errors("opt", value) == []


@pytest.mark.parametrize("value", UNITS_BAD)
def test_unit_names_refused(value):
    errors = r.UnitName().errors("nvidia_container_toolkit_cdi_refresh_after[0]", value)
    assert len(errors) == 1 and "nvidia_container_toolkit_cdi_refresh_after[0]: " in str(errors[0])


@pytest.mark.parametrize("manager", sorted(PACKAGES))
def test_package_names_by_each_managers_rules(manager):
    good, bad = PACKAGES[manager]
    for value in good:
        assert r.PackageName(manager).errors("p", value) == [], (manager, value)
    for value in bad + [v for _i, v in COMMON] + WRONG_TYPES:
        errors = r.PackageName(manager).errors("nvidia_driver_packages_extra[0]", value)
        assert len(errors) == 1, (manager, value)
        assert str(errors[0]).startswith("nvidia_driver_packages_extra[0]: "), errors


def test_without_a_manager_a_name_passes_only_when_all_three_accept_it():
    assert r.PackageName(None).errors("p", "nvidia-utils") == []
    for value in ("NetworkManager", "nvidia_driver", "python@3", "-x"):
        assert r.PackageName(None).errors("p", value), value


PATHS_BAD = [v for _i, v in hostile.text_classes("control", "non_ascii", "empty", "huge")] + [
    "relative/labels", "labels.txt", "/etc/../shadow", "/etc/./x", "~/x", "/a\nb", "/etc/x/"]
# For the variables whose empty value means "not set".
PATHS_BAD_OPTIONAL = [value for value in PATHS_BAD if value != ""]


def _defaults(role: str) -> dict:
    with open(os.path.join(ROLES_DIR, role, "defaults", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


# Values the callers of the internal role pass (it has no defaults for them).
CALLER_VALUES = {
    "internal_repository_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
    "internal_repository_key_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub",
    "internal_repository_key_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
    "internal_repository_keyring": "/etc/apt/keyrings/gpuhost-nvidia-cuda.gpg",
    "internal_repository_file": "/etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources",
    "internal_repository_name": "gpuhost-nvidia",
    "internal_repository_description": "NVIDIA driver packages",
}


def _values(role: str, **changes) -> dict:
    defaults = dict(CALLER_VALUES, **_defaults(role))
    values = {name: defaults.get(name) for name in r.variables(role)}
    # Templated defaults (URLs, the scrape host) as the role renders them.
    for name, value in list(values.items()):
        if isinstance(value, str) and "{{" in value:
            values[name] = {"gpu_exporter_nvidia_gpu_exporter_url": "https://github.com/utkuozdemir/nvidia_gpu_exporter/releases/"
                                                                    "download/v1.3.1/nvidia_gpu_exporter_1.3.1_linux_x86_64.tar.gz",
                            "gpu_exporter_scrape_host": "gpu01.example.com"}[name]
    values.update(changes)
    return values


@pytest.mark.parametrize("role", r.roles())
def test_every_role_default_passes(role):
    assert r.role_errors(role, _values(role), {"package_manager": "apt"}) == []


@pytest.mark.parametrize("role", r.roles())
def test_every_variable_of_the_table_is_an_option_of_the_role(role):
    with open(os.path.join(ROLES_DIR, role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        specs = yaml.safe_load(handle)["argument_specs"]
    options = {name for spec in specs.values() for name in spec.get("options", {})}
    assert set(r.variables(role)) <= options, sorted(set(r.variables(role)) - options)


@pytest.mark.parametrize("role", r.roles())
def test_the_roles_first_check_hands_over_every_variable_of_the_table(role):
    """The task's dict and the table cannot drift apart: each name appears as a key of the check's mapping."""
    tasks_dir = os.path.join(ROLES_DIR, role, "tasks")
    text = "".join(open(os.path.join(tasks_dir, f), encoding="utf-8").read() for f in os.listdir(tasks_dir) if f.endswith(".yml"))
    keys = set(re.findall(r"'([a-z_0-9]+)': [a-z_0-9]+", text))
    assert set(r.variables(role)) <= keys, sorted(set(r.variables(role)) - keys)


@pytest.mark.parametrize("role", r.roles())
def test_a_variable_not_handed_over_fails_closed(role):
    values = _values(role)
    name = r.variables(role)[0]
    del values[name]
    assert r.role_errors(role, values) == ["%s: not handed to the check (the role's first task must pass it)" % name]
    assert r.role_errors(role, dict(_values(role), extra_thing=1)) == ["extra_thing: the check has no rule for it"]


def test_an_unknown_role_or_a_non_mapping_is_a_value_error():
    with pytest.raises(ValueError, match="no rules for the role 'bogus'"):
        r.role_errors("bogus", {})
    with pytest.raises(ValueError, match="expected a mapping"):
        r.role_errors("gpu_exporter", ["x"])  # type: ignore[arg-type]


# One hostile battery per variable: the role's defaults with one value changed; the check names that variable.
BATTERY = {
    # Empty: every address (":9400"), as before.
    ("gpu_exporter", "gpu_exporter_listen_address"): [h for h in HOSTS_BAD if h != ""] + WRONG_TYPES,
    ("gpu_exporter", "gpu_exporter_scrape_host"): HOSTS_BAD + WRONG_TYPES,
    ("gpu_exporter", "gpu_exporter_port"): PORTS_BAD,
    ("gpu_exporter", "gpu_exporter_dcgm_hostengine"): HOSTPORTS_BAD,
    ("gpu_exporter", "gpu_exporter_facts_root"): PATHS_BAD[:-1],
    # Empty or null: nvidia_driver's keyring for the family.
    ("gpu_exporter", "gpu_exporter_dcgm_repo_keyring"): PATHS_BAD_OPTIONAL,
    ("gpu_exporter", "gpu_exporter_dcgm_version"): ["4.5.2 -1", "4.5.2-1\n", "latest", "4.5.2;x", "", "-4.5", "4.5.2-1 datacenter-x"],
    ("gpu_exporter", "gpu_exporter_dcgm_exporter_version"): ["*", "4.8.2-1=", "4.8.2-1 x", "4.8.2-1\n"],
    ("gpu_exporter", "gpu_exporter_dcgm_cuda_major"): [0, -1, 100, "12 ", "12\n", "12;x", "twelve", True, 12.0],
    # Empty or null: nvidia_driver's fingerprint for the distribution.
    ("gpu_exporter", "gpu_exporter_dcgm_repo_key_fingerprint"): ["EB69", "EB693B3035CD5710E231E123A4B469963BF863CC\n", "X" * 40],
    ("gpu_exporter", "gpu_exporter_nvidia_gpu_exporter_version"): ["1.3.1/../../x", "1", "v1.3.1", "1.3.1\n", "1.3.1 ", "latest"],
    ("gpu_exporter", "gpu_exporter_nvidia_gpu_exporter_backend"): ["NVML", "nvml ", "exec\n", "", "smi", True, 1],
    ("gpu_exporter", "gpu_exporter_nvidia_gpu_exporter_url"): ["ftp://x/y", "https://x/y z", "https://x/\ny", "", "//x/y",
                                                               "javascript:alert(1)"],
    ("gpu_exporter", "gpu_exporter_nvidia_gpu_exporter_sha256"): ["0" * 63, "0" * 65, "g" * 64, "0" * 64 + "\n", " " + "0" * 64],
    ("gpu_exporter", "gpu_exporter_dcgm_collectors"): [
        [], "DCGM_FI_DEV_GPU_TEMP", [{"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": "t\nDCGM_FI_X, gauge, x"}],
        [{"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": "a, b"}],
        [{"field": "DCGM_FI_DEV_GPU_TEMP\n", "type": "gauge", "help": "x"}],
        [{"field": "temp", "type": "gauge", "help": "x"}], [{"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge, x", "help": "x"}],
        [{"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge"}], ["DCGM_FI_DEV_GPU_TEMP"],
        # the shape of a DCGM field, but no field the exporter knows (it would stop at start)
        [{"field": "DCGM_FI_DEV_GPU_TEMPERATURE", "type": "gauge", "help": "x"}],
        [{"field": "DCGM_EXP_XID_ERRORS_COUNTXXX", "type": "gauge", "help": "x"}]],
    ("nvidia_container_toolkit", "nvidia_container_toolkit_node_labels_file"): PATHS_BAD_OPTIONAL,
    ("nvidia_container_toolkit", "nvidia_container_toolkit_runtime_path"): PATHS_BAD,
    ("nvidia_container_toolkit", "nvidia_container_toolkit_docker_daemon_json"): PATHS_BAD,
    ("nvidia_container_toolkit", "nvidia_container_toolkit_containerd_dropin"): PATHS_BAD,
    ("nvidia_container_toolkit", "nvidia_container_toolkit_crio_dropin"): PATHS_BAD_OPTIONAL,
    ("nvidia_container_toolkit", "nvidia_container_toolkit_cdi_refresh_after"): [[u] for u in UNITS_BAD] + ["docker.service"],
    ("nvidia_container_toolkit", "nvidia_container_toolkit_cdi_refresh_before"): [[u] for u in UNITS_BAD],
    ("nvidia_container_toolkit", "nvidia_container_toolkit_cdi_feature_flags"): [["Bad Flag"], ["x" * 65], ["a,b"], ["a\n"], "a"],
    ("nvidia_container_toolkit", "nvidia_container_toolkit_cdi_refresh_env"): [
        {"PATH": "/tmp"}, {"NVIDIA_CTK_DEBUG": "true\nExecStart=/bin/sh"}, {"NVIDIA_CTK_DEBUG": "$(reboot)"},
        {"NVIDIA_CTK_DEBUG": "a b"}, {"nvidia_x": "1"}, {"NVIDIA_X\n": "1"}, {"NVIDIA_X": "a#b"}, {"NVIDIA_X": "'q'"},
        {"NVIDIA_X": ["a"]}, ["NVIDIA_X=1"]],
    ("nvidia_driver", "nvidia_driver_packages_extra"): [[p] for p in PACKAGES["apt"][1]] + ["nvidia-smi"],
    ("nvidia_driver", "nvidia_driver_mok_key"): PATHS_BAD,
    ("nvidia_driver", "nvidia_driver_repo_url"): ["https://x/ y", "https://x/\nSigned-By: /tmp/k", "ftp://x", "x"],
    ("nvidia_driver", "nvidia_driver_reboot_timeout"): [0, -1, True, "1800 ", 86401],
    ("gpu_settings", "gpu_settings_spec_path"): PATHS_BAD + ["/etc/gpu settings.json", "/etc/%n.json", "/etc/$HOME.json"],
    ("gpu_settings", "gpu_settings_python_interpreter"): ["/usr/bin/python3 -c 'import os'", "/usr/bin/py;thon", "python3"],
    ("internal_repository", "internal_repository_url"): ["https://x/ y", "https://x/\nSigned-By: /tmp/k", "ftp://x", "", "x",
                                                         "https://x\tTrusted: yes"],
    ("internal_repository", "internal_repository_suites"): ["stable main", "stable\nTrusted: yes", "", "-x", "a;b"],
    ("internal_repository", "internal_repository_components"): [["main contrib"], ["main\nTrusted: yes"], [""], "main"],
    ("internal_repository", "internal_repository_name"): ["options", "local", "a]\n[options", "a b", "-x", "a/b"],
    ("internal_repository", "internal_repository_keyring"): PATHS_BAD,
    ("internal_repository", "internal_repository_file"): PATHS_BAD,
    ("internal_repository", "internal_repository_description"): ["a\nb", "x" * 201],
    ("internal_repository", "internal_repository_versions_of"): [["nvidia driver"], ["-x"], "nvidia-driver"],
    ("gpu_verify", "gpu_verify_image"): ["nvidia/cuda --privileged", "-v/:/host", "img\n", "", "img;id"],
    ("gpu_verify", "gpu_verify_docker_host"): ["/var/run/docker.sock", "unix:///x y", "tcp://h:1\n"],
    ("gpu_verify", "gpu_verify_timeout"): [0, 3601, True, "60"],
    ("gpu_verify", "gpu_verify_device_ids"): [["all"], ["0 1"], ["GPU-x"], "0"],
    ("vfio_passthrough", "vfio_passthrough_pci_addresses"): [["01:00.0\n"], ["0000:01:00.8"], ["01:00"], ["*"], "01:00.0"],
    ("vfio_passthrough", "vfio_passthrough_device_ids"): [["10de:*"], ["10de:2204,10de:1aef"], ["10de 2204"], ["10de:22044"]],
    ("vfio_passthrough", "vfio_passthrough_facts_root"): PATHS_BAD[:-1],
    ("gpu_doctor", "gpu_doctor_report_dir"): PATHS_BAD_OPTIONAL[:-1],
    ("gpu_doctor", "gpu_doctor_cdi_dirs"): [["/etc/cdi/../x"], ["cdi"], "/etc/cdi"],
    ("gpu_doctor", "gpu_doctor_runtime_name"): ["nvidia runc", "-nvidia", "nvidia\n"],
    ("gpu_compose", "gpu_compose_projects"): [[{"path": "srv", "services": [{"name": "a"}]}], [{"path": "/srv/../etc"}], [{"services": []}],
                                              [{"path": "/srv", "compose_files": ["../../etc/x.yml"]}], [{"path": "/srv", "mode": "u+rwx\n"}],
                                              [{"path": "/srv", "owner": "root;id"}], "/srv"],
    ("gpu_compose", "gpu_compose_strategy"): ["Explicit", "explicit\n", "", True],
    ("gpu_compose", "gpu_compose_override_name"): ["../x.yml", "a/b.yml", "x.json", ".yml", "x .yml", "x.yml\n"],
    ("gpu_compose", "gpu_compose_mode"): ["u+x;id", "u=rw g=r", "0888", True, 99999, "644 "],
    ("gpu_compose", "gpu_compose_owner"): ["root;id", "ro ot", "", "a" * 33, "-x", "root\n", "r$oot", "root:root"],
    ("gpu_settings", "gpu_settings_packages"): [[p] for p in PACKAGES["apt"][1]] + ["nvidia-utils-580"],
}


@pytest.mark.parametrize("role,name", sorted(BATTERY))
def test_each_hostile_value_is_refused_naming_its_variable(role, name):
    for value in BATTERY[(role, name)]:
        errors = r.role_errors(role, _values(role, **{name: value}), {"package_manager": "apt"})
        assert errors, (name, value)
        assert all(e.startswith(name) for e in errors), (name, value, errors)
        assert all("\n" not in e for e in errors), errors


def test_every_problem_is_reported_at_once():
    errors = r.role_errors("gpu_exporter", _values("gpu_exporter", gpu_exporter_port=70000, gpu_exporter_listen_address="0.0.0.0 -x",
                                                   gpu_exporter_dcgm_hostengine="localhost:5555\nExecStartPre=/bin/sh"))
    assert [e.split(":")[0] for e in errors] == ["gpu_exporter_listen_address", "gpu_exporter_port", "gpu_exporter_dcgm_hostengine"]


def test_an_empty_listen_address_still_means_every_address():
    assert r.role_errors("gpu_exporter", _values("gpu_exporter", gpu_exporter_listen_address="")) == []
    assert r.listen_address("", 9400) == ":9400"


def test_the_nvidia_gpu_exporter_needs_its_sha256_when_chosen():
    values = _values("gpu_exporter")
    assert r.role_errors("gpu_exporter", values, {"kind": "auto"}) == []
    errors = r.role_errors("gpu_exporter", values, {"kind": "nvidia_gpu_exporter"})
    assert len(errors) == 1 and errors[0].startswith("gpu_exporter_nvidia_gpu_exporter_sha256: is empty")
    assert r.role_errors("gpu_exporter", dict(values, gpu_exporter_nvidia_gpu_exporter_sha256="a" * 64), {"kind": "nvidia_gpu_exporter"}) == []


@pytest.mark.parametrize("manager,name", [("dnf", "NetworkManager"), ("dnf5", "NetworkManager"), ("pacman", "python@3")])
def test_package_names_follow_the_hosts_manager(manager, name):
    assert r.role_errors("nvidia_driver", _values("nvidia_driver", nvidia_driver_packages_extra=[name]), {"package_manager": manager}) == []
    assert r.role_errors("nvidia_driver", _values("nvidia_driver", nvidia_driver_packages_extra=[name]), {"package_manager": "apt"})


@pytest.mark.parametrize("host,port,expected", [("0.0.0.0", 9400, "0.0.0.0:9400"), ("::", 9400, "[::]:9400"),
                                                ("fe80::1", "1", "[fe80::1]:1"), ("gpu01", 9835, "gpu01:9835")])
def test_listen_address_brackets_ipv6(host, port, expected):
    assert r.listen_address(host, port) == expected


@pytest.mark.parametrize("value", ["0.0.0.0:9400", "[::]:9400", "a b", 'a"b', "a\\b", "100%", "$HOME", "${IFS}", "'q'",
                                   "-a", "x;y", "--web.listen-address=1.2.3.4:1", "\u00e9", "", 9400, "%%", "$$", "a\\\"b"])
def test_systemd_quote_keeps_one_word(value):
    assert systemd_split("/bin/x " + r.systemd_quote(value) + " --next") == ["/bin/x", str(value), "--next"]


def test_systemd_quote_leaves_plain_words_as_they_are():
    assert r.systemd_quote("0.0.0.0:9400") == "0.0.0.0:9400"
    assert r.systemd_quote("/etc/gpuhost-gpu-exporter/dcgm-collectors.csv") == "/etc/gpuhost-gpu-exporter/dcgm-collectors.csv"


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "\u2028", True, None, 1.5, ["a"]])
def test_systemd_quote_refuses_what_no_line_can_carry(value):
    with pytest.raises(ValueError, match="systemd_quote"):
        r.systemd_quote(value)


# The services as the override module checks them (module_utils/_compose.py), before the role installs PyYAML.
COMPOSE_SERVICES = [[{"path": "/srv", "services": []}], [{"path": "/srv", "services": ["app"]}],
                    [{"path": "/srv", "services": [{"name": "app;id"}]}],
                    [{"path": "/srv", "services": [{"name": "app\nx"}]}],
                    [{"path": "/srv", "services": [{"name": "a", "count": 0}]}],
                    [{"path": "/srv", "services": [{"name": "a", "count": 1, "device_ids": ["0"]}]}],
                    [{"path": "/srv", "services": [{"name": "a"}, {"name": "a"}]}],
                    [{"path": "/srv", "strategy": "pack", "services": [{"name": "a", "count": 1}]}],
                    [{"path": "/srv", "services": [{"name": "a", "device_ids": ["0\n1"]}]}],
                    [{"path": "/srv", "services": [{"name": "a", "environment": {"A B": "x"}}]}]]


@pytest.mark.parametrize("projects", COMPOSE_SERVICES)
def test_compose_services_are_checked_by_the_modules_rules_first(projects):
    errors = r.role_errors("gpu_compose", _values("gpu_compose", gpu_compose_projects=projects))
    assert errors and all(e.startswith("gpu_compose_projects") for e in errors), errors


def test_good_compose_services_pass():
    projects = [{"path": "/srv/ml", "services": [{"name": "trainer", "count": 2}, {"name": "infer", "device_ids": ["0"]}]},
                {"path": "/srv/b", "strategy": "spread", "services": [{"name": "a", "count": 1}], "mode": 420},
                {"path": "/srv/c", "services": [{"name": "a"}], "mode": "u=rw,g=r,o=r"}]
    assert r.role_errors("gpu_compose", _values("gpu_compose", gpu_compose_projects=projects)) == []


def test_collectors_take_every_dcgm_field_the_exporter_knows():
    """The default collectors, a legacy name and an exporter counter pass; dcgm-exporter's own test table of a name it
    refuses (counter_config_test.go, "Invalid Input DCGM_EXP_XID_ERRORS_COUNTXXX") is refused here too."""
    names = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_PERSISTENCE_MODE", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_EXP_XID_ERRORS_COUNT")
    rows = [{"field": f, "type": "gauge", "help": "x"} for f in names]
    assert not [e for e in r.role_errors("gpu_exporter", {"gpu_exporter_dcgm_collectors": rows}) if "collectors" in e]
    bad = [{"field": "DCGM_EXP_XID_ERRORS_COUNTXXX", "type": "gauge", "help": "x"}]
    errors = r.role_errors("gpu_exporter", {"gpu_exporter_dcgm_collectors": bad})
    assert any("is not a DCGM field dcgm-exporter 4.8.2 knows" in e for e in errors), errors

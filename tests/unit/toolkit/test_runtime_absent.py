"""nvidia_container_runtime state=absent on real user configs: what present added goes, the user's bytes come back.

Each case converges with state=present (check mode first), then removes with state=absent (check mode first), and
asserts that the file holds the user's original bytes again, that check mode predicted exactly what the real run did
and wrote nothing, and that a second removal changes nothing.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _runtime
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_container_runtime

# A daemon.json as users write it: two-space indent, their own key order, a runtime of their own, no trailing newline.
USER_DAEMON_JSON = """{
  "log-driver": "journald",
  "registry-mirrors": ["https://mirror.example.internal"],
  "default-runtime": "runc",
  "features": {"buildkit": true, "cdi": false},
  "runtimes": {
    "crun": {"path": "/usr/bin/crun"}
  },
  "live-restore": true
}"""

# containerd 1.x, version 2, with the user's own imports and CRI settings (comments included).
USER_CONTAINERD_V2 = """# Site containerd config, managed by the platform team.
version = 2
imports = ["/etc/containerd/site.d/*.toml"]
root = "/var/lib/containerd"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""

# containerd 2.x, version 3, with a user import spread over lines.
USER_CONTAINERD_V3 = """version = 3
imports = [
  "/etc/containerd/site.d/*.toml",
]

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"""

# containerd.io's shipped config: no version line, so version 1; the module rewrites it in place.
CONTAINERD_IO_DEFAULT = """#   Copyright 2018-2022 Docker Inc.

disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#state = "/run/containerd"
"""

USER_CRIO_CONF = """[crio.runtime]
default_runtime = "crun"
[crio.runtime.runtimes.crun]
runtime_path = "/usr/bin/crun"
monitor_path = "/usr/libexec/crio/conmon"
"""


def _converge_and_remove(run_module, args: dict, files: list[Path], converged_check=None) -> tuple[dict, dict]:
    """present (check, real), absent (check, real, again); the absent check and real results."""
    before = {f: f.read_bytes() if f.exists() else None for f in files}
    assert run_module(nvidia_container_runtime, args, check_mode=True)["changed"]
    assert run_module(nvidia_container_runtime, args)["changed"]
    assert not run_module(nvidia_container_runtime, args)["changed"]
    converged = {f: f.read_bytes() if f.exists() else None for f in files}
    if converged_check is not None:
        converged_check()
    record = Path(args["record"])
    assert record.exists()
    absent = dict(args, state="absent")
    predicted = run_module(nvidia_container_runtime, absent, check_mode=True)
    assert predicted["changed"]
    assert {f: f.read_bytes() if f.exists() else None for f in files} == converged, "check mode wrote a file"
    assert record.exists(), "check mode removed the record"
    real = run_module(nvidia_container_runtime, absent)
    assert real["changed"]
    assert (real["changed_files"], real["removed_files"]) == (predicted["changed_files"], predicted["removed_files"])
    assert {f: f.read_bytes() if f.exists() else None for f in files} == before
    assert not record.exists()
    again = run_module(nvidia_container_runtime, absent)
    assert not again["changed"], again
    return predicted, real


def test_docker_user_keys_come_back_byte_for_byte(run_module, tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(USER_DAEMON_JSON)
    args = {"runtime": "docker", "path": str(daemon), "default_runtime": True, "cdi": True, "backup": False,
            "record": str(tmp_path / "record.json")}
    predicted, _real = _converge_and_remove(run_module, args, [daemon])
    assert predicted["changed_files"] == [str(daemon)] and predicted["removed_files"] == []
    assert daemon.read_text() == USER_DAEMON_JSON


def test_docker_file_the_module_created_is_removed(run_module, tmp_path):
    daemon = tmp_path / "docker" / "daemon.json"
    args = {"runtime": "docker", "path": str(daemon), "cdi": True, "record": str(tmp_path / "record.json")}
    predicted, real = _converge_and_remove(run_module, args, [daemon])
    assert predicted["removed_files"] == [str(daemon)]
    assert real["backup_files"] and not daemon.exists()


def test_docker_keys_the_user_changed_since_are_kept(run_module, tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(USER_DAEMON_JSON)
    args = {"runtime": "docker", "path": str(daemon), "default_runtime": True, "cdi": True, "backup": False,
            "record": str(tmp_path / "record.json")}
    run_module(nvidia_container_runtime, args)
    doc = json.loads(daemon.read_text())
    doc["log-driver"] = "local"
    doc["runtimes"]["youki"] = {"path": "/usr/bin/youki"}
    daemon.write_text(json.dumps(doc))
    assert run_module(nvidia_container_runtime, dict(args, state="absent"))["changed"]
    expected = json.loads(USER_DAEMON_JSON)
    expected["log-driver"] = "local"
    expected["runtimes"]["youki"] = {"path": "/usr/bin/youki"}
    assert json.loads(daemon.read_text()) == expected


def test_docker_without_record_removes_only_the_runtime_and_its_default(run_module, tmp_path):
    # As nvidia-ctk leaves it: no record, so features.cdi is the user's as far as the module can know.
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"default-runtime": "nvidia", "features": {"cdi": True}, "log-driver": "journald",
                                  "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}))
    args = {"runtime": "docker", "path": str(daemon), "state": "absent", "backup": False, "record": str(tmp_path / "r.json")}
    assert run_module(nvidia_container_runtime, args, check_mode=True)["changed_files"] == [str(daemon)]
    assert run_module(nvidia_container_runtime, args)["changed"]
    assert json.loads(daemon.read_text()) == {"features": {"cdi": True}, "log-driver": "journald"}
    assert not run_module(nvidia_container_runtime, args)["changed"]


def test_docker_absent_on_a_host_without_docker_changes_nothing(run_module, tmp_path):
    args = {"runtime": "docker", "path": str(tmp_path / "daemon.json"), "state": "absent", "record": str(tmp_path / "r.json")}
    result = run_module(nvidia_container_runtime, args)
    assert not result["changed"] and not (tmp_path / "daemon.json").exists()


@pytest.mark.parametrize("user_config", [USER_CONTAINERD_V2, USER_CONTAINERD_V3], ids=["v2", "v3"])
def test_containerd_imports_line_and_dropin_go_user_imports_stay(run_module, tmp_path, user_config):
    main = tmp_path / "config.toml"
    main.write_text(user_config)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "default_runtime": True, "cdi": True,
            "backup": False, "record": str(tmp_path / "record.json")}

    def imports_extended():
        assert tomllib.loads(main.read_text())["imports"] == ["/etc/containerd/site.d/*.toml", str(tmp_path / "conf.d/*.toml")]

    predicted, _real = _converge_and_remove(run_module, args, [main, dropin], imports_extended)
    assert main.read_text() == user_config and not dropin.exists()
    assert predicted["changed_files"] == [str(main)] and predicted["removed_files"] == [str(dropin)]


def test_containerd_v2_without_imports_gets_its_bytes_back(run_module, tmp_path):
    user = "# mine\nversion = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3.9\"\n"
    main = tmp_path / "config.toml"
    main.write_text(user)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "record": str(tmp_path / "record.json")}
    _converge_and_remove(run_module, args, [main, dropin])
    assert main.read_text() == user


def test_containerd_v1_in_place_merge_is_undone_with_its_comments(run_module, tmp_path):
    main = tmp_path / "config.toml"
    main.write_text(CONTAINERD_IO_DEFAULT)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "cdi": True, "backup": False,
            "record": str(tmp_path / "record.json")}

    def rewritten_in_place():  # as nvidia-ctk does
        assert "Copyright" not in main.read_text() and not dropin.exists()

    predicted, _real = _converge_and_remove(run_module, args, [main, dropin], rewritten_in_place)
    assert main.read_text() == CONTAINERD_IO_DEFAULT and predicted["removed_files"] == []


def test_containerd_configs_the_module_created_are_removed(run_module, tmp_path):
    main = tmp_path / "containerd" / "config.toml"
    dropin = tmp_path / "containerd" / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "config_version": 3, "backup": False,
            "record": str(tmp_path / "record.json")}
    predicted, _real = _converge_and_remove(run_module, args, [main, dropin])
    assert predicted["removed_files"] == [str(main), str(dropin)]


def test_crio_dropin_goes_crio_conf_untouched(run_module, tmp_path):
    conf = tmp_path / "crio.conf"
    conf.write_text(USER_CRIO_CONF)
    dropin = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    args = {"runtime": "crio", "crio_config_dir": str(dropin.parent), "crio_config": str(conf), "default_runtime": True,
            "record": str(tmp_path / "record.json")}
    result = run_module(nvidia_container_runtime, args, check_mode=True)
    assert result["crio_config_dir"] == {"path": str(dropin.parent), "source": "crio_config_dir"}
    assert result["files"] == [str(dropin)]
    predicted, _real = _converge_and_remove(run_module, args, [conf, dropin])
    assert predicted["removed_files"] == [str(dropin)]


# What the installed CRI-O prints for --config-dir: urfave/cli's help text as crio 1.17's docs/crio.8.md has it, and
# with the quoted default and environment variable of later releases.
CRIO_HELP_OLD = """   --config-dir value, -d value  Path to the configuration drop-in directory.
    This directory will be recursively iterated and each file gets applied
    to the configuration in their processing order.
    The global config file, provided via '--config,-c' or per default in
\t/etc/crio/crio.conf, always has a lower priority than the files in the directory specified
\tby '--config-dir,-d'. (default: /etc/crio/crio.conf.d)
   --conmon value  Path to the conmon binary (default: "")
"""
CRIO_HELP_NEW = """   --config value, -c value      Path to configuration file (default: "/etc/crio/crio.conf") [$CONTAINER_CONFIG]
   --config-dir value, -d value  Path to the configuration drop-in directory.
    named '01-my-overwrite'.
    The global config file, provided via '--config,-c' or per default in
    /etc/crio/crio.conf, always has a lower priority than the files in the directory specified
    by '--config-dir,-d'.
    Besides that, provided command line parameters have a higher priority
    than any configuration file. (default: "/usr/local/etc/crio/crio.conf.d") [$CONTAINER_CONFIG_DIR]
"""


@pytest.mark.parametrize(("text", "expected"), [
    (CRIO_HELP_OLD, "/etc/crio/crio.conf.d"),
    (CRIO_HELP_NEW, "/usr/local/etc/crio/crio.conf.d"),
    ("   --config value  Path to configuration file (default: \"/etc/crio/crio.conf\")\n", None),
    ("", None),
])
def test_crio_config_dir_from_help(text, expected):
    assert _runtime.crio_config_dir_from_help(text) == expected


class _FakeModule:
    """What crio_config_dir uses of AnsibleModule: params, get_bin_path, run_command (a real process), warn."""

    def __init__(self, crio: str | None, config_dir: str | None = None):
        self.params = {"crio_config_dir": config_dir}
        self.crio = crio
        self.warnings: list[str] = []
        self.commands: list[list[str]] = []

    def get_bin_path(self, name):
        return self.crio if name == "crio" else None

    def run_command(self, args, environ_update=None):
        import subprocess
        self.commands.append(args)
        done = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, **(environ_update or {})), check=False)
        return done.returncode, done.stdout, done.stderr

    def warn(self, text):
        self.warnings.append(text)


def _fake_crio(tmp_path: Path, help_text: str) -> str:
    crio = tmp_path / "bin" / "crio"
    crio.parent.mkdir()
    (tmp_path / "help.txt").write_text(help_text)
    crio.write_text("#!/bin/sh\n[ \"$1\" = --help ] || exit 2\ncat %s\n" % (tmp_path / "help.txt"))
    crio.chmod(0o755)
    return str(crio)


def test_crio_dropin_directory_is_what_the_installed_crio_reads(tmp_path):
    module = _FakeModule(_fake_crio(tmp_path, CRIO_HELP_NEW))
    assert nvidia_container_runtime.crio_config_dir(module) == {"path": "/usr/local/etc/crio/crio.conf.d",
                                                                "source": "crio --help"}
    assert module.commands == [[module.crio, "--help"]] and not module.warnings


def test_crio_help_without_a_default_warns_and_uses_the_builtin_default(tmp_path):
    module = _FakeModule(_fake_crio(tmp_path, "usage: crio\n"))
    assert nvidia_container_runtime.crio_config_dir(module)["path"] == "/etc/crio/crio.conf.d"
    assert "names no --config-dir default" in module.warnings[0]


def test_crio_config_dir_option_wins_without_running_crio(tmp_path):
    module = _FakeModule(_fake_crio(tmp_path, CRIO_HELP_NEW), config_dir="/etc/crio/conf.d")
    assert nvidia_container_runtime.crio_config_dir(module) == {"path": "/etc/crio/conf.d", "source": "crio_config_dir"}
    assert module.commands == []


def test_crio_without_a_crio_binary_uses_crio_builtin_default(run_module, tmp_path):
    args = {"runtime": "crio", "state": "absent", "record": str(tmp_path / "record.json")}
    result = run_module(nvidia_container_runtime, args, check_mode=True)
    assert result["crio_config_dir"] == {"path": "/etc/crio/crio.conf.d", "source": "CRI-O's built-in default"}
    assert result["files"] == ["/etc/crio/crio.conf.d/99-nvidia.conf"]
    assert "crio" in result["_bin_lookups"]


def test_containerd_remove_keeps_an_empty_imports_line_the_user_had():
    path = "/etc/containerd/config.toml"
    original = "version = 2\nimports = []\n"
    current = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    main = _runtime.parse_toml(current, path)
    assert _runtime.containerd_main_remove(current, main, path, "/etc/containerd/conf.d/*.toml", True, original) == original
    # Without a record the empty line goes: the module most likely added it.
    assert _runtime.containerd_main_remove(current, main, path, "/etc/containerd/conf.d/*.toml") == "version = 2\n"


def test_docker_remove_keeps_a_default_runtime_the_user_set_later():
    text = json.dumps({"default-runtime": "crun", "runtimes": {"nvidia": {"path": "/x"}, "crun": {"path": "/c"}}})
    out = _runtime.docker_remove(text, "daemon.json", "nvidia", True, '{"runtimes": {"crun": {"path": "/c"}}}')
    assert json.loads(out) == {"default-runtime": "crun", "runtimes": {"crun": {"path": "/c"}}}


def test_record_is_private_to_the_module(run_module, tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"a": 1}')
    record = tmp_path / "lib" / "record.json"
    run_module(nvidia_container_runtime, {"runtime": "docker", "path": str(daemon), "record": str(record)})
    assert json.loads(record.read_text()) == {str(daemon): {"original": '{"a": 1}'}}
    assert os.path.isdir(record.parent)

"""containerd imports: a main config without a version line, containerd 2.2's own conf.d import, and spellings of
the same glob.

Cases derived from NVIDIA/nvidia-container-toolkit pkg/config/engine/containerd/config_drop_in_test.go,
TestEnsureImports (commit d34b3046758cb1a5db606b2a39519c731bbf9f56), and from containerd's own sources (commit
301026e58c619e63d09c0ec411012e54c0124b03): defaults/defaults_unix.go DefaultConfigIncludePattern, written into the
default config by cmd/containerd/command/config.go since v2.2.0 (commit 9ca659a5); cmd/containerd/server/config
resolveImports (filepath.Clean, relative to the importing file).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _runtime
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_container_runtime

V3 = "io.containerd.cri.v1.runtime"

# The head and CRI runtime part of `containerd config default` from containerd 2.2.1 (Ubuntu 24.04's
# 2.2.1-0ubuntu1~24.04.2, as a public install log prints it; docs/sources.md). Single-quoted TOML strings included.
CONTAINERD_22_DEFAULT = """version = 3
root = '/var/lib/containerd'
state = '/run/containerd'
temp = ''
disabled_plugins = []
required_plugins = []
oom_score = 0
imports = ['/etc/containerd/conf.d/*.toml']

[grpc]
address = '/run/containerd/containerd.sock'

[plugins]
[plugins.'io.containerd.cri.v1.runtime']
enable_selinux = false
enable_cdi = true
cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      ignore_blockio_not_enabled_errors = false

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
          runtime_type = 'io.containerd.runc.v2'
          runtime_path = ''
          pod_annotations = []
          container_annotations = []
          privileged_without_host_devices = false
          privileged_without_host_devices_all_devices_allowed = false
          cgroup_writable = false
          base_runtime_spec = ''
          sandboxer = 'podsandbox'
          io_type = ''

          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
            BinaryName = ''
            CriuImagePath = ''
            NoNewKeyring = false
            Root = ''
            SystemdCgroup = true
"""


# TestEnsureImports: the three cases, through the planner (the drop-in is /another/path/file.toml).
@pytest.mark.parametrize("description, config, expected", [
    ("empty", "", ["/another/path/*.toml"]),
    ("existing imports as string slice", 'imports = ["/foo/bar/*.toml"]\n', ["/foo/bar/*.toml", "/another/path/*.toml"]),
    ("existing imports as any slice", "imports = ['/foo/bar/*.toml']\n", ["/foo/bar/*.toml", "/another/path/*.toml"]),
])
def test_ensure_imports_agrees_with_upstream(description, config, expected):
    main = tomllib.loads(config)
    version = _runtime.containerd_version(main, None, "/etc/containerd/config.toml")
    assert version == 2, "a versionless config with imports takes the drop-in path"
    out = tomllib.loads(_runtime.containerd_main(config, main, "/etc/containerd/config.toml", "/another/path/*.toml", version))
    assert out["imports"] == expected
    # upstream sets the version only on an empty config (ensureImports: len(config.Keys()) == 0)
    assert ("version" in out) == (not config)


def test_versionless_config_with_imports_gets_a_dropin_through_the_module(run_module, tmp_path):
    main = tmp_path / "config.toml"
    user = '# mine\nimports = ["/foo/bar/*.toml"]\noom_score = 0\n'
    main.write_text(user)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "backup": False,
            "record": str(tmp_path / "record.json")}
    assert run_module(nvidia_container_runtime, args)["changed"]
    assert main.read_text() == '# mine\nimports = ["/foo/bar/*.toml", "%s"]\noom_score = 0\n' % (tmp_path / "conf.d" / "*.toml")
    doc = tomllib.loads(dropin.read_text())
    assert doc["version"] == 2
    assert doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == \
        "/usr/bin/nvidia-container-runtime"
    assert not run_module(nvidia_container_runtime, args)["changed"]
    assert run_module(nvidia_container_runtime, dict(args, state="absent"))["changed"]
    assert main.read_text() == user and not dropin.exists()


@pytest.mark.parametrize("config", [
    'imports = ["/foo/*.toml"]\n[plugins.cri]\n  sandbox_image = "pause:3.9"\n',  # version 1 plugin names
    'imports = ["/foo/*.toml"]\ndisabled_plugins = ["cri"]\n',  # a short name containerd 1.7 rejects in version 2
])
def test_versionless_config_with_version_1_names_stays_in_place(config):
    # deliberate (docs/threat-model.md): nvidia-ctk's file source reads any versionless file as version 1 and merges
    # in place; we do that too where a version 2 drop-in would make containerd 1.7 reject the short names.
    assert _runtime.containerd_version(tomllib.loads(config), None, "c") == 1


def test_versionless_config_with_imports_takes_a_requested_version():
    assert _runtime.containerd_version({"imports": []}, 3, "c") == 3


def test_containerd_22_default_config_gets_no_second_import():
    main = tomllib.loads(CONTAINERD_22_DEFAULT)
    version = _runtime.containerd_version(main, None, "/etc/containerd/config.toml")
    assert version == 3
    glob = "/etc/containerd/conf.d/*.toml"
    assert glob == _runtime.CONTAINERD_DEFAULT_IMPORT
    assert _runtime.containerd_main(CONTAINERD_22_DEFAULT, main, "/etc/containerd/config.toml", glob, 3) == CONTAINERD_22_DEFAULT
    dropin = tomllib.loads(_runtime.dump_toml(_runtime.containerd_dropin(main, 3, "nvidia", "/usr/bin/nvidia-container-runtime")))
    cri = dropin["plugins"][V3]
    assert dropin["version"] == 3 and list(dropin["plugins"]) == [V3]
    # The whole CRI runtime table travels (containerd before 2.1 replaces plugin tables), 2.x's keys included.
    assert cri["enable_cdi"] is True and cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    runc = main["plugins"][V3]["containerd"]["runtimes"]["runc"]
    assert {k: v for k, v in nvidia.items() if k != "options"} == {k: v for k, v in runc.items() if k != "options"}
    assert nvidia["sandboxer"] == "podsandbox" and nvidia["cgroup_writable"] is False
    assert nvidia["options"] == {**runc["options"], "BinaryName": "/usr/bin/nvidia-container-runtime"}
    assert "Runtime" not in nvidia["options"]  # only version 1 reads the legacy key
    assert cri["containerd"]["default_runtime_name"] == "runc"


@pytest.mark.parametrize("entry", ["conf.d/*.toml", "./conf.d/*.toml", "/etc/containerd//conf.d/*.toml",
                                   "/etc/containerd/conf.d/../conf.d/*.toml"])
def test_an_import_spelt_differently_counts_as_present(entry):
    text = "version = 2\nimports = [%r]\n" % entry
    out = _runtime.containerd_main(text, tomllib.loads(text), "/etc/containerd/config.toml", "/etc/containerd/conf.d/*.toml", 2)
    assert out == text


@pytest.mark.parametrize("entry", ["/etc/containerd/conf.d/*.conf", "/etc/containerd/conf.d/*", "conf/*.toml", ""])
def test_other_imports_do_not_count(entry):
    assert not _runtime.same_import(entry, "/etc/containerd/conf.d/*.toml", "/etc/containerd/config.toml")


def test_an_import_the_main_config_already_had_survives_absent(run_module, tmp_path):
    # containerd 2.2's default config already imports its conf.d: present writes only the drop-in, absent only
    # removes it; the user's import line stays (other drop-ins live there).
    main = tmp_path / "config.toml"
    user = CONTAINERD_22_DEFAULT.replace("/etc/containerd/conf.d/*.toml", str(tmp_path / "conf.d" / "*.toml"))
    main.write_text(user)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "backup": False,
            "record": str(tmp_path / "record.json")}
    present = run_module(nvidia_container_runtime, args)
    assert present["changed_files"] == [str(dropin)] and main.read_text() == user
    absent = run_module(nvidia_container_runtime, dict(args, state="absent"))
    assert absent["removed_files"] == [str(dropin)] and absent["changed_files"] == []
    assert main.read_text() == user


def test_remove_keeps_the_import_when_told_or_when_the_original_had_it():
    text = 'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    main = tomllib.loads(text)
    glob = "/etc/containerd/conf.d/*.toml"
    assert _runtime.containerd_main_remove(text, main, "c", glob, keep_import=True) == text
    assert _runtime.containerd_main_remove(text, main, "c", glob, True, text) == text
    assert _runtime.containerd_main_remove(text, main, "c", glob) == "version = 3\n"


def test_without_a_record_absent_keeps_containerd_own_import(run_module, tmp_path, monkeypatch):
    # No record (nvidia-ctk configured the host, or a hand edit): the module cannot tell who added containerd's own
    # conf.d import, so it stays; a glob of another directory goes, as before.
    main = tmp_path / "config.toml"
    text = 'version = 2\nimports = ["%s"]\n' % (tmp_path / "conf.d" / "*.toml")
    main.write_text(text)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "state": "absent", "backup": False,
            "record": str(tmp_path / "record.json")}
    monkeypatch.setattr(_runtime, "CONTAINERD_DEFAULT_IMPORT", str(tmp_path / "conf.d" / "*.toml"))
    assert not run_module(nvidia_container_runtime, args)["changed"]
    assert main.read_text() == text
    monkeypatch.setattr(_runtime, "CONTAINERD_DEFAULT_IMPORT", "/etc/containerd/conf.d/*.toml")
    assert run_module(nvidia_container_runtime, args)["changed"]
    assert tomllib.loads(main.read_text()) == {"version": 2}


def test_main_config_path_matters_for_relative_imports():
    assert _runtime.same_import("conf.d/*.toml", "/opt/ctr/conf.d/*.toml", str(Path("/opt/ctr/config.toml")))
    assert not _runtime.same_import("conf.d/*.toml", "/etc/containerd/conf.d/*.toml", "/opt/ctr/config.toml")

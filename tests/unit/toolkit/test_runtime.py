"""Unit tests for the runtime-config planners (plugins/module_utils/_runtime.py)."""

from __future__ import annotations

import json
import tomllib

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _runtime

DAEMON = '{\n  "log-driver": "journald",\n  "registry-mirrors": ["https://mirror.example"],\n  "runtimes": {"crun": {"path": "/usr/bin/crun"}}\n}\n'
RT = "/usr/bin/nvidia-container-runtime"


def test_docker_merge_keeps_every_other_key():
    out = json.loads(_runtime.docker_merge(DAEMON, "/etc/docker/daemon.json", "nvidia", RT, cdi=True))
    assert out["log-driver"] == "journald"
    assert out["registry-mirrors"] == ["https://mirror.example"]
    assert out["runtimes"] == {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"path": RT}}
    assert out["features"] == {"cdi": True}
    assert "default-runtime" not in out


def test_docker_merge_is_byte_identical_when_nothing_changes():
    once = _runtime.docker_merge(DAEMON, "d", "nvidia", RT, default_runtime=True)
    assert json.loads(once)["default-runtime"] == "nvidia"
    assert _runtime.docker_merge(once, "d", "nvidia", RT, default_runtime=True) is once or \
        _runtime.docker_merge(once, "d", "nvidia", RT, default_runtime=True) == once
    hand_formatted = '{"runtimes":{"nvidia":{"path":"%s","runtimeArgs":["--debug"]}}}' % RT
    assert _runtime.docker_merge(hand_formatted, "d", "nvidia", RT) == hand_formatted


def test_docker_merge_drops_only_its_own_default_runtime():
    own = _runtime.docker_merge('{"default-runtime": "nvidia"}', "d", "nvidia", RT)
    assert "default-runtime" not in json.loads(own)
    other = _runtime.docker_merge('{"default-runtime": "runc"}', "d", "nvidia", RT)
    assert json.loads(other)["default-runtime"] == "runc"


def test_docker_merge_missing_or_empty_file():
    for text in (None, "", "  \n"):
        assert json.loads(_runtime.docker_merge(text, "d", "nvidia", RT)) == {"runtimes": {"nvidia": {"path": RT}}}


@pytest.mark.parametrize("text, fragment", [
    ('{"log-driver": "journald",', "is not valid JSON"),
    ("[1, 2]", "must hold a JSON object"),
    ('{"runtimes": []}', '"runtimes" must be a JSON object'),
    ('{"features": true}', '"features" must be a JSON object'),
])
def test_docker_merge_refuses_what_it_cannot_merge(text, fragment):
    with pytest.raises(_runtime.RuntimeConfigError) as err:
        _runtime.docker_merge(text, "/etc/docker/daemon.json", "nvidia", RT, cdi=True)
    assert fragment in str(err.value)
    assert "/etc/docker/daemon.json" in str(err.value)


def test_invalid_json_names_the_position():
    with pytest.raises(_runtime.RuntimeConfigError, match=r"line 1 column \d+"):
        _runtime.docker_merge('{"a": }', "/etc/docker/daemon.json", "nvidia", RT)


MAIN = """# ops config
version = 2
root = "/var/lib/containerd"
imports = ["/etc/containerd/site.toml"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example.internal/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""


def test_containerd_main_extends_imports_and_keeps_every_line():
    main = _runtime.parse_toml(MAIN, "c")
    out = _runtime.containerd_main(MAIN, main, "c", "/etc/containerd/conf.d/*.toml", 2)
    assert tomllib.loads(out)["imports"] == ["/etc/containerd/site.toml", "/etc/containerd/conf.d/*.toml"]
    assert [line for line in out.splitlines() if not line.startswith("imports")] == \
        [line for line in MAIN.splitlines() if not line.startswith("imports")]
    assert _runtime.containerd_main(out, tomllib.loads(out), "c", "/etc/containerd/conf.d/*.toml", 2) == out


def test_containerd_main_adds_imports_after_version_or_creates_the_file():
    text = 'version = 2\n\n[grpc]\n  address = "/run/containerd/containerd.sock"\n'
    out = _runtime.containerd_main(text, tomllib.loads(text), "c", "/d/*.toml", 2)
    assert out.startswith('version = 2\nimports = ["/d/*.toml"]\n')
    assert tomllib.loads(out)["grpc"]["address"] == "/run/containerd/containerd.sock"
    no_version = '[grpc]\n  address = "x"\n'
    assert tomllib.loads(_runtime.containerd_main(no_version, tomllib.loads(no_version), "c", "/d/*.toml", 2))["imports"] == ["/d/*.toml"]
    assert tomllib.loads(_runtime.containerd_main(None, {}, "c", "/d/*.toml", 3)) == {"version": 3, "imports": ["/d/*.toml"]}


def test_containerd_dropin_carries_the_cri_table_and_runc_options():
    main = _runtime.parse_toml(MAIN, "c")
    doc = _runtime.containerd_dropin(main, 2, "nvidia", RT, default_runtime=True)
    parsed = tomllib.loads(_runtime.dump_toml(doc, _runtime.DROPIN_HEADER))
    cri = parsed["plugins"]["io.containerd.grpc.v1.cri"]
    assert parsed["version"] == 2
    assert cri["sandbox_image"] == "registry.example.internal/pause:3.9"
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": True}
    assert cri["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True, "BinaryName": RT}}


def test_containerd_v3_uses_the_containerd2_plugin():
    doc = _runtime.containerd_dropin({"version": 3}, 3, "nvidia", RT)
    assert list(doc["plugins"]) == ["io.containerd.cri.v1.runtime"]
    assert "default_runtime_name" not in doc["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]


def test_containerd_version_follows_the_root_config():
    # A config with content and no version is version 1 (containerd, and upstream containerd.go parseVersion).
    assert _runtime.containerd_version({"disabled_plugins": ["cri"]}, None, "c") == 1
    assert _runtime.containerd_version({"version": 1}, None, "c") == 1
    assert _runtime.containerd_version({}, None, "c") == 2
    assert _runtime.containerd_version({}, 3, "c") == 3
    assert _runtime.containerd_version({"version": 4}, None, "c") == 4
    assert _runtime.containerd_version({"version": 3}, 3, "c") == 3
    with pytest.raises(_runtime.RuntimeConfigError, match=r"has version = 2, but config_version 3 was requested.*"
                       r"Leave config_version unset"):
        _runtime.containerd_version({"version": 2}, 3, "/etc/containerd/config.toml")
    with pytest.raises(_runtime.RuntimeConfigError, match=r"no version line, so containerd reads it as version 1.*"
                       r"containerd config migrate"):
        _runtime.containerd_version({"root": "/x"}, 2, "/etc/containerd/config.toml")
    with pytest.raises(_runtime.RuntimeConfigError, match="config version 5"):
        _runtime.containerd_version({"version": 5}, None, "c")


def test_parse_toml_names_file_and_error():
    with pytest.raises(_runtime.RuntimeConfigError, match=r"/etc/containerd/config.toml is not valid TOML \(Invalid value"):
        _runtime.parse_toml("imports = [\n", "/etc/containerd/config.toml")
    assert _runtime.parse_toml(None, "c") == {}


def test_dump_toml_round_trips_odd_keys_and_values():
    doc = {"a": 1, "b": {"c.d": {"x": "q\"uote", "l": [1, 2], "f": 1.5, "t": False}, "e": {}}}
    assert tomllib.loads(_runtime.dump_toml(doc)) == doc
    with pytest.raises(_runtime.RuntimeConfigError):
        _runtime.dump_toml({"a": object()})


def test_crio_dropin():
    parsed = tomllib.loads(_runtime.dump_toml(_runtime.crio_dropin("nvidia", RT, default_runtime=True)))
    assert parsed == {"crio": {"runtime": {"default_runtime": "nvidia",
                                           "runtimes": {"nvidia": {"runtime_path": RT, "runtime_type": "oci"}}}}}


def test_check_request():
    assert _runtime.check_request(["docker", "containerd", "crio"]) == []
    assert "unknown container runtime(s) 'podman'" in _runtime.check_request(["docker", "podman"])[0]

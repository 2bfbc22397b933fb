"""Cases derived from NVIDIA/nvidia-container-toolkit's own tests, run through our planners.

Each case names the upstream file and test (description) it comes from. The configs are upstream's, compared as
parsed data (the effective config), not as text. Where we differ on purpose, ``deliberate`` says how, and the module
documentation (plugins/modules/nvidia_container_runtime.py) says why:

* docker: upstream replaces ``runtimes.<name>`` with ``{"path": ..., "args": []}``; we set ``path`` and keep the
  entry's other keys (dockerd reads ``runtimeArgs``, it has no ``args`` key).
* containerd, no runtime to inherit from: upstream writes ``runtime_engine = ""`` and ``runtime_root = ""``; we don't
  (containerd 2.x removed both keys; empty means unset).
* containerd v1: upstream's test builds the config without a runtime type, so it expects ``runtime_type = ""``; the
  nvidia-ctk command's default runtime type, which we use, is io.containerd.runc.v2.

Upstream commit read: d34b3046758cb1a5db606b2a39519c731bbf9f56.
"""

from __future__ import annotations

import json
import tomllib

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _runtime

V2 = "io.containerd.grpc.v1.cri"
V3 = "io.containerd.cri.v1.runtime"


def _without_empty_engine_root(doc):
    """Upstream's expectation minus the empty runtime_engine/runtime_root it writes for a runtime with no source."""
    for plugin in doc.get("plugins", {}).values():
        for runtime in plugin.get("containerd", {}).get("runtimes", {}).values():
            for key in ("runtime_engine", "runtime_root"):
                if runtime.get(key) == "":
                    del runtime[key]
    return doc


def _effective(main: dict, version: int, dropin: dict) -> dict:
    """What containerd 1.x reads: the main config with the drop-in's plugin tables replacing its own."""
    out = dict(main)
    out["version"] = dropin["version"]
    plugins = dict(out.get("plugins", {}))
    plugins.update(dropin["plugins"])
    out["plugins"] = plugins
    return out


def _containerd(config: str, set_as_default: bool, name: str = "test", path: str = "/usr/bin/test") -> dict:
    main = tomllib.loads(config)
    version = _runtime.containerd_version(main, None, "config.toml")
    if version == 1:
        return tomllib.loads(_runtime.containerd_v1(config, main, name, path, set_as_default))
    dropin = _runtime.containerd_dropin(main, version, name, path, set_as_default)
    # The drop-in must survive our TOML writer and a real TOML parser.
    dropin = tomllib.loads(_runtime.dump_toml(dropin))
    return _effective(main, version, dropin)


def _runc_v2(plugin: str, runtimes: dict, default: str | None = None) -> str:
    """A containerd config in upstream's test layout."""
    lines = ["version = %d" % (2 if plugin == V2 else 3), "[plugins]", '[plugins."%s"]' % plugin,
             '[plugins."%s".containerd]' % plugin]
    if default:
        lines.append('default_runtime_name = "%s"' % default)
    for rname, body in runtimes.items():
        lines.append('[plugins."%s".containerd.runtimes.%s]' % (plugin, rname))
        lines += ["%s = %s" % (k, json.dumps(v)) for k, v in body.items() if k != "options"]
        lines.append('[plugins."%s".containerd.runtimes.%s.options]' % (plugin, rname))
        lines += ["%s = %s" % (k, json.dumps(v)) for k, v in body["options"].items()]
    return "\n".join(lines) + "\n"


RUNC = {"privileged_without_host_devices": True, "runtime_engine": "engine", "runtime_root": "root",
        "runtime_type": "type", "options": {"BinaryName": "/usr/bin/runc", "SystemdCgroup": True}}
DEFAULT = {"privileged_without_host_devices": False, "runtime_engine": "defaultengine", "runtime_root": "defaultroot",
           "runtime_type": "defaulttype", "options": {"BinaryName": "/usr/bin/default", "SystemdCgroup": False}}
NO_SOURCE = {"privileged_without_host_devices": False, "runtime_type": "io.containerd.runc.v2",
             "options": {"BinaryName": "/usr/bin/test"}}


def _as(source: dict, **options) -> dict:
    out = {k: v for k, v in source.items() if k != "options"}
    out["options"] = {**source["options"], "BinaryName": "/usr/bin/test", **options}
    return out


# pkg/config/engine/containerd/config_test.go, TestAddRuntime
CONTAINERD_V2_V3 = [
    ("empty config not default runtime", "", False,
     {"version": 2, "plugins": {V2: {"containerd": {"runtimes": {"test": NO_SOURCE}}}}}),
    ("empty config, set as default runtime", "", True,
     {"version": 2, "plugins": {V2: {"containerd": {"default_runtime_name": "test", "runtimes": {"test": NO_SOURCE}}}}}),
    ("empty runtime_type copied from runc options is replaced with default",
     _runc_v2(V2, {"runc": {**RUNC, "privileged_without_host_devices": False, "runtime_engine": "", "runtime_root": "",
                            "runtime_type": ""}}), False,
     {"version": 2, "plugins": {V2: {"containerd": {"runtimes": {
         "runc": {**RUNC, "privileged_without_host_devices": False, "runtime_engine": "", "runtime_root": "", "runtime_type": ""},
         "test": _as({**RUNC, "privileged_without_host_devices": False, "runtime_engine": "", "runtime_root": "",
                      "runtime_type": "io.containerd.runc.v2"})}}}}}),
    ("options from runc are imported", _runc_v2(V2, {"runc": RUNC}), False,
     {"version": 2, "plugins": {V2: {"containerd": {"runtimes": {"runc": RUNC, "test": _as(RUNC)}}}}}),
    ("options from default runtime are imported", _runc_v2(V2, {"default": {**RUNC, "options": {
        "BinaryName": "/usr/bin/default", "SystemdCgroup": True}}}, default="default"), False,
     {"version": 2, "plugins": {V2: {"containerd": {"default_runtime_name": "default", "runtimes": {
         "default": {**RUNC, "options": {"BinaryName": "/usr/bin/default", "SystemdCgroup": True}},
         "test": _as(RUNC)}}}}}),
    ("options from the default runtime take precedence over runc",
     _runc_v2(V2, {"runc": RUNC, "default": DEFAULT}, default="default"), False,
     {"version": 2, "plugins": {V2: {"containerd": {"default_runtime_name": "default", "runtimes": {
         "runc": RUNC, "default": DEFAULT, "test": _as(DEFAULT)}}}}}),
    ("empty v3 spec is supported", "version = 3\n", False,
     {"version": 3, "plugins": {V3: {"containerd": {"runtimes": {"test": NO_SOURCE}}}}}),
    ("v3 spec is supported", _runc_v2(V3, {"runc": RUNC}), False,
     {"version": 3, "plugins": {V3: {"containerd": {"runtimes": {"runc": RUNC, "test": _as(RUNC)}}}}}),
    ("runtime already exists in config, default runtime",
     _runc_v2(V2, {"test": {**NO_SOURCE, "runtime_engine": "", "runtime_root": ""}}, default="test"), True,
     {"version": 2, "plugins": {V2: {"containerd": {"default_runtime_name": "test", "runtimes": {"test": NO_SOURCE}}}}}),
    ("runtime already exists in config, not default runtime",
     _runc_v2(V2, {"test": {**NO_SOURCE, "runtime_engine": "", "runtime_root": ""}}, default="test"), False,
     {"version": 2, "plugins": {V2: {"containerd": {"runtimes": {"test": NO_SOURCE}}}}}),
]


@pytest.mark.parametrize("description, config, set_as_default, expected", CONTAINERD_V2_V3,
                         ids=[c[0] for c in CONTAINERD_V2_V3])
def test_containerd_add_runtime_agrees_with_upstream(description, config, set_as_default, expected):
    assert _without_empty_engine_root(_containerd(config, set_as_default)) == _without_empty_engine_root(expected)


# pkg/config/engine/containerd/config_v1_test.go, TestAddRuntimeV1: a config without a version line is version 1;
# the runtime goes into plugins.cri of the main config, with options.Runtime as well as BinaryName.
V1_RUNC = """
[plugins]
[plugins.cri]
  [plugins.cri.containerd]
  [plugins.cri.containerd.runtimes]
    [plugins.cri.containerd.runtimes.runc]
    privileged_without_host_devices = true
    runtime_engine = "engine"
    runtime_root = "root"
    runtime_type = "type"
    [plugins.cri.containerd.runtimes.runc.options]
      BinaryName = "/usr/bin/runc"
      SystemdCgroup = true
"""


def test_containerd_v1_empty_config_not_default_runtime():
    # "empty config not default runtime", forced to version 1 (upstream uses its legacy-config switch).
    out = tomllib.loads(_runtime.containerd_v1("version = 1\n", {"version": 1}, "test", "/usr/bin/test"))
    assert out == {"version": 1, "plugins": {"cri": {"containerd": {"runtimes": {"test": {
        # deliberate: runtime_type io.containerd.runc.v2 (upstream's test has none), no empty engine/root
        "privileged_without_host_devices": False, "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": "/usr/bin/test", "Runtime": "/usr/bin/test"}}}}}}}


def test_containerd_v1_options_from_runc_are_imported():
    out = _containerd(V1_RUNC, False)
    assert out["version"] == 1
    assert out["plugins"]["cri"]["containerd"]["runtimes"]["test"] == _as(RUNC, Runtime="/usr/bin/test")
    assert out["plugins"]["cri"]["containerd"]["runtimes"]["runc"] == RUNC


def test_containerd_v1_options_from_the_default_runtime_take_precedence_over_runc():
    config = V1_RUNC.replace("  [plugins.cri.containerd]\n", '  [plugins.cri.containerd]\n  default_runtime_name = "default"\n') + """
    [plugins.cri.containerd.runtimes.default]
    runtime_type = "defaulttype"
    runtime_engine = "defaultengine"
    runtime_root = "defaultroot"
    privileged_without_host_devices = false
    [plugins.cri.containerd.runtimes.default.options]
      BinaryName = "/usr/bin/default"
      SystemdCgroup = false
"""
    out = _containerd(config, False)
    assert out["plugins"]["cri"]["containerd"]["runtimes"]["test"] == _as(DEFAULT, Runtime="/usr/bin/test")


def test_containerd_v1_containerd_io_default_config_is_handled_in_place():
    # The case: containerd.io's default config (no version line, CRI disabled). containerd reads it as v1.
    config = "#   Copyright 2018-2022 Docker Inc.\n\ndisabled_plugins = [\"cri\"]\n\n#root = \"/var/lib/containerd\"\n"
    main = tomllib.loads(config)
    assert _runtime.containerd_version(main, None, "c") == 1
    out = _runtime.containerd_v1(config, main, "nvidia", "/usr/bin/nvidia-container-runtime")
    parsed = tomllib.loads(out)
    assert parsed["version"] == 1 and parsed["disabled_plugins"] == ["cri"]
    assert "imports" not in parsed
    assert parsed["plugins"]["cri"]["containerd"]["runtimes"]["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    # Idempotent: the file it wrote is returned byte for byte.
    assert _runtime.containerd_v1(out, parsed, "nvidia", "/usr/bin/nvidia-container-runtime") == out


# cmd/nvidia-ctk/runtime/configure/configure_test.go, "containerd: enable CDI": enable_cdi = true in the CRI plugin.
@pytest.mark.parametrize("version, plugin", [(2, V2), (3, V3), (1, "cri")])
def test_containerd_enable_cdi(version, plugin):
    main = {"version": version}
    if version == 1:
        doc = tomllib.loads(_runtime.containerd_v1("version = 1\n", main, "nvidia", "/r", cdi=True))
    else:
        doc = _runtime.containerd_dropin(main, version, "nvidia", "/r", cdi=True)
    assert doc["plugins"][plugin]["enable_cdi"] is True


# cmd/nvidia-ctk/runtime/configure/configure_test.go, "containerd: custom runtime name and path"
def test_containerd_custom_runtime_name_and_path():
    text = _runtime.dump_toml(_runtime.containerd_dropin({}, 2, "gpu", "/custom/path/nvidia-container-runtime"))
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpu]' in text
    assert 'BinaryName = "/custom/path/nvidia-container-runtime"' in text
    assert "gpu-cdi" not in text and "gpu-legacy" not in text


def test_nvidia_default_runtime_is_not_a_source():
    # pkg/config/engine/engine.go GetLowLevelRuntimes: nvidia* defaults are skipped, then runc, then crun.
    assert _runtime.source_runtimes("nvidia-cdi", "nvidia") == ["runc", "crun"]
    assert _runtime.source_runtimes("crun", "nvidia") == ["crun", "runc"]
    assert _runtime.source_runtimes("kata", "nvidia") == ["kata", "runc", "crun"]
    crun_only = _runc_v2(V2, {"crun": {"runtime_type": "io.containerd.runc.v2",
                                       "options": {"BinaryName": "/usr/bin/crun", "SystemdCgroup": True}}})
    assert _containerd(crun_only, False)["plugins"][V2]["containerd"]["runtimes"]["test"]["options"] == {
        "BinaryName": "/usr/bin/test", "SystemdCgroup": True}


# pkg/config/engine/crio/crio_test.go, TestAddRuntime: source crio.conf, destination an empty drop-in.
CRIO = [
    ("empty config not default runtime", "", False,
     {"crio": {"runtime": {"runtimes": {"test": {"runtime_path": "/usr/bin/test", "runtime_type": "oci"}}}}}),
    ("empty config, set as default runtime", "", True,
     {"crio": {"runtime": {"default_runtime": "test",
                           "runtimes": {"test": {"runtime_path": "/usr/bin/test", "runtime_type": "oci"}}}}}),
    ("options from runc are imported",
     '[crio]\n[crio.runtime.runtimes.runc]\nruntime_path = "/usr/bin/runc"\nruntime_type = "runcoci"\nrunc_option = "option"\n',
     False, {"crio": {"runtime": {"runtimes": {"test": {
         "runtime_path": "/usr/bin/test", "runtime_type": "oci", "runc_option": "option"}}}}}),
    ("options from default runtime are imported",
     '[crio]\n[crio.runtime]\ndefault_runtime = "default"\n[crio.runtime.runtimes.default]\nruntime_path = "/usr/bin/default"\n'
     'runtime_type = "defaultoci"\ndefault_option = "option"\n', False,
     {"crio": {"runtime": {"runtimes": {"test": {
         "runtime_path": "/usr/bin/test", "runtime_type": "oci", "default_option": "option"}}}}}),
    ("options from the default runtime take precedence over runc",
     '[crio]\n[crio.runtime]\ndefault_runtime = "default"\n[crio.runtime.runtimes.default]\nruntime_path = "/usr/bin/default"\n'
     'runtime_type = "defaultoci"\ndefault_option = "option"\n[crio.runtime.runtimes.runc]\nruntime_path = "/usr/bin/runc"\n'
     'runtime_type = "runcoci"\nrunc_option = "option"\n', False,
     {"crio": {"runtime": {"runtimes": {"test": {
         "runtime_path": "/usr/bin/test", "runtime_type": "oci", "default_option": "option"}}}}}),
    ("runtime already exists in config, default runtime",
     '[crio]\n[crio.runtime]\ndefault_runtime = "test"\n[crio.runtime.runtimes.test]\nruntime_path = "/usr/bin/test"\n'
     'runtime_type = "oci"\n', True,
     {"crio": {"runtime": {"default_runtime": "test",
                           "runtimes": {"test": {"runtime_path": "/usr/bin/test", "runtime_type": "oci"}}}}}),
    ("runtime already exists in config, not default runtime",
     '[crio]\n[crio.runtime]\ndefault_runtime = "test"\n[crio.runtime.runtimes.test]\nruntime_path = "/usr/bin/test"\n'
     'runtime_type = "oci"\n', False,
     {"crio": {"runtime": {"runtimes": {"test": {"runtime_path": "/usr/bin/test", "runtime_type": "oci"}}}}}),
]


@pytest.mark.parametrize("description, config, set_as_default, expected", CRIO, ids=[c[0] for c in CRIO])
def test_crio_add_runtime_agrees_with_upstream(description, config, set_as_default, expected):
    source = _runtime.parse_toml(config, "crio.conf")
    dropin = tomllib.loads(_runtime.dump_toml(_runtime.crio_dropin("test", "/usr/bin/test", set_as_default, source)))
    assert dropin == expected


# pkg/config/engine/docker/docker_test.go, TestUpdateConfigDefaultRuntime
@pytest.mark.parametrize("config, set_as_default, expected", [
    ({}, False, None),
    ({}, True, "NAME"),
    ({"default-runtime": "ALREADY_SET"}, False, "ALREADY_SET"),
    ({"default-runtime": "ALREADY_SET"}, True, "NAME"),
])
def test_docker_default_runtime_agrees_with_upstream(config, set_as_default, expected):
    out = json.loads(_runtime.docker_merge(json.dumps(config), "daemon.json", "NAME", "/r", set_as_default))
    assert out.get("default-runtime") == expected


def _upstream_docker(entries: dict) -> dict:
    # deliberate: no "args": [] (see the module docs); the path and every other key are as upstream's.
    return {name: {k: v for k, v in entry.items() if k != "args"} for name, entry in entries.items()}


# pkg/config/engine/docker/docker_test.go, TestUpdateConfigRuntimes (test cases 0 to 4)
@pytest.mark.parametrize("config, runtimes, expected", [
    ({}, {"runtime1": "/test/runtime/dir/runtime1", "runtime2": "/test/runtime/dir/runtime2"},
     {"runtimes": {"runtime1": {"path": "/test/runtime/dir/runtime1", "args": []},
                   "runtime2": {"path": "/test/runtime/dir/runtime2", "args": []}}}),
    ({"runtimes": {"runtime1": {"path": "runtime1", "args": []}}},
     {"runtime1": "/test/runtime/dir/runtime1", "runtime2": "/test/runtime/dir/runtime2"},
     {"runtimes": {"runtime1": {"path": "/test/runtime/dir/runtime1", "args": []},
                   "runtime2": {"path": "/test/runtime/dir/runtime2", "args": []}}}),
    ({"runtimes": {"not-nvidia": {"path": "some-other-path", "args": []}}}, {"runtime1": "/test/runtime/dir/runtime1"},
     {"runtimes": {"not-nvidia": {"path": "some-other-path", "args": []},
                   "runtime1": {"path": "/test/runtime/dir/runtime1", "args": []}}}),
    ({"exec-opts": ["native.cgroupdriver=systemd"], "log-driver": "json-file", "log-opts": {"max-size": "100m"},
      "storage-driver": "overlay2"}, {"runtime1": "/test/runtime/dir/runtime1"},
     {"exec-opts": ["native.cgroupdriver=systemd"], "log-driver": "json-file", "log-opts": {"max-size": "100m"},
      "storage-driver": "overlay2", "runtimes": {"runtime1": {"path": "/test/runtime/dir/runtime1", "args": []}}}),
])
def test_docker_runtimes_agree_with_upstream(config, runtimes, expected):
    text = json.dumps(config)
    for name, path in runtimes.items():
        text = _runtime.docker_merge(text, "daemon.json", name, path)
    out = json.loads(text)
    want = dict(expected)
    # Existing entries keep their keys (here upstream's own "args"); only new entries differ by the absent "args".
    want["runtimes"] = {name: (entry if name in config.get("runtimes", {}) else _upstream_docker({name: entry})[name])
                        for name, entry in expected["runtimes"].items()}
    assert out == want


# cmd/nvidia-ctk/runtime/configure/configure_test.go, "docker: enable CDI"
def test_docker_enable_cdi():
    assert json.loads(_runtime.docker_merge(None, "daemon.json", "nvidia", "/r", cdi=True))["features"] == {"cdi": True}

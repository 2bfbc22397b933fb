"""nvidia_container_toolkit_config: the keys we own in the toolkit's config.toml, the rest byte for byte.

The base file is the config the toolkit generates by default, as NVIDIA/nvidia-container-toolkit's own test expects it
(api/config/v1/toml_test.go, TestTomlContents "default", commit d34b3046758cb1a5db606b2a39519c731bbf9f56), with the
platform-dependent ldconfig line as the package writes it.
"""

from __future__ import annotations

import json
import tomllib

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _toolkit_config
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_container_toolkit_config

DEFAULT = """#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"""

HARDENED = {"mode": "cdi", "accept_envvar_when_unprivileged": False, "no_cgroups": True,
            "features": {"disable-cuda-compat-lib-hook": True, "ignore-imex-channel-requests": True}}


def test_merge_changes_only_the_asked_lines():
    out = _toolkit_config.merge(DEFAULT, HARDENED)
    doc = tomllib.loads(out)
    assert doc["nvidia-container-runtime"]["mode"] == "cdi"
    assert doc["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False
    assert doc["nvidia-container-cli"]["no-cgroups"] is True
    assert doc["features"] == {"disable-cuda-compat-lib-hook": True, "ignore-imex-channel-requests": True}
    # The commented default stays, the real line follows it; every other line is the package's.
    assert "#accept-nvidia-visible-devices-envvar-when-unprivileged = true\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n" in out
    assert "#no-cgroups = false\nno-cgroups = true\n" in out
    assert 'log-level = "info"\nmode = "cdi"\n' in out
    assert out.startswith(DEFAULT.replace('mode = "auto"', 'mode = "cdi"').split("#accept-nvidia-visible-devices-envvar", maxsplit=1)[0])
    removed = [line for line in DEFAULT.splitlines() if line not in out.splitlines()]
    assert removed == ['mode = "auto"']
    assert out.endswith('[nvidia-ctk]\npath = "nvidia-ctk"\n\n[features]\ndisable-cuda-compat-lib-hook = true\n'
                        'ignore-imex-channel-requests = true\n')


def test_merge_is_idempotent_and_byte_exact():
    out = _toolkit_config.merge(DEFAULT, HARDENED)
    assert _toolkit_config.merge(out, HARDENED) is out
    assert _toolkit_config.merge(DEFAULT, {"mode": "auto"}) is DEFAULT
    assert _toolkit_config.merge(DEFAULT, {}) is DEFAULT


def test_no_file_and_nothing_asked_stays_no_file():
    assert _toolkit_config.merge(None, {}) is None
    out = _toolkit_config.merge(None, {"no_cgroups": True})
    assert tomllib.loads(out) == {"nvidia-container-cli": {"no-cgroups": True}}


def test_a_file_without_trailing_newline_and_quoted_keys():
    text = '[nvidia-container-cli]\n"no-cgroups" = false'
    out = _toolkit_config.merge(text, {"no_cgroups": True})
    assert out == '[nvidia-container-cli]\nno-cgroups = true\n'


@pytest.mark.parametrize("settings, fragment", [
    ({"mode": "hybrid"}, "mode 'hybrid': choose auto, legacy, cdi, csv, jit-cdi"),
    ({"no_cgroups": "yes"}, "no_cgroups must be true or false"),
    ({"features": {"disable-cuda-compat-lib-hooks": True}}, "'disable-cuda-compat-lib-hooks' is not a toolkit feature flag"),
    ({"features": {"disable-cuda-compat-lib-hook": "true"}}, "features.disable-cuda-compat-lib-hook must be true or false"),
    ({"features": ["x"]}, "features must be a mapping"),
    ({"swarm_resource": "x"}, "swarm_resource is not a toolkit setting"),
])
def test_every_value_is_validated(settings, fragment):
    with pytest.raises(_toolkit_config.ToolkitConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        _toolkit_config.merge(DEFAULT, settings)


def test_a_table_that_is_not_a_table_is_refused():
    with pytest.raises(_toolkit_config.ToolkitConfigError, match="features. must be a table"):
        _toolkit_config.merge('features = "on"\n', {"features": {"disable-cuda-compat-lib-hook": True}})


def test_an_edit_that_would_change_other_keys_is_refused():
    # An inline table holds the key: a line edit cannot reach it, and the check after the edit catches it.
    text = 'nvidia-container-cli = {no-cgroups = false}\n'
    with pytest.raises(_toolkit_config.ToolkitConfigError):
        _toolkit_config.merge(text, {"no_cgroups": True})


def test_restore_gives_the_original_bytes_back():
    out = _toolkit_config.merge(DEFAULT, HARDENED)
    managed = _toolkit_config.owned_keys(HARDENED)
    assert _toolkit_config.restore(out, DEFAULT, managed) == DEFAULT


def test_restore_keeps_what_the_user_changed_since():
    out = _toolkit_config.merge(DEFAULT, HARDENED).replace('log-level = "info"', 'log-level = "debug"')
    back = _toolkit_config.restore(out, DEFAULT, _toolkit_config.owned_keys(HARDENED))
    doc = tomllib.loads(back)
    assert doc["nvidia-container-runtime"]["log-level"] == "debug"
    assert doc["nvidia-container-runtime"]["mode"] == "auto" and "features" not in doc
    assert "no-cgroups" not in doc["nvidia-container-cli"]


def test_restore_removes_a_file_the_module_created():
    out = _toolkit_config.merge(None, {"no_cgroups": True})
    assert _toolkit_config.restore(out, None, [["nvidia-container-cli", "no-cgroups"]]) is None


# ---------------------------------------------------------------------------------------------------- the module
def test_module_check_mode_real_run_idempotence_and_absent(run_module, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(DEFAULT)
    args = {"path": str(path), "record": str(tmp_path / "record.json"), "backup": False,
            **{k: v for k, v in HARDENED.items() if k != "mode"}, "runtime_mode": HARDENED["mode"]}
    predicted = run_module(nvidia_container_toolkit_config, args, check_mode=True)
    assert not predicted.get("failed"), predicted
    assert predicted["changed"] and path.read_text() == DEFAULT and not (tmp_path / "record.json").exists()
    real = run_module(nvidia_container_toolkit_config, args)
    assert real["changed"] and real["diff"] == predicted["diff"]
    assert sorted(real["managed"]) == sorted(["nvidia-container-runtime.mode", "accept-nvidia-visible-devices-envvar-when-unprivileged",
                                              "nvidia-container-cli.no-cgroups", "features.disable-cuda-compat-lib-hook",
                                              "features.ignore-imex-channel-requests"])
    assert json.loads((tmp_path / "record.json").read_text())[str(path)]["original"] == DEFAULT
    assert not run_module(nvidia_container_toolkit_config, args)["changed"]
    assert not run_module(nvidia_container_toolkit_config, args, check_mode=True)["changed"]
    absent = {"path": str(path), "record": str(tmp_path / "record.json"), "state": "absent", "backup": False}
    assert run_module(nvidia_container_toolkit_config, absent, check_mode=True)["changed"]
    assert path.read_text() != DEFAULT
    assert run_module(nvidia_container_toolkit_config, absent)["changed"]
    assert path.read_text() == DEFAULT and not (tmp_path / "record.json").exists()
    assert not run_module(nvidia_container_toolkit_config, absent)["changed"]


def test_module_refuses_a_bad_flag_before_reading(run_module, tmp_path):
    result = run_module(nvidia_container_toolkit_config, {"path": str(tmp_path / "c.toml"), "record": str(tmp_path / "r.json"),
                                                          "features": {"no-such-flag": True}})
    assert result["failed"]
    assert "'no-such-flag' is not a toolkit feature flag" in result["msg"]


@pytest.mark.parametrize("version, expected", [
    ("1.17.4", {}),  # no switch yet; the hook ran only in CDI mode (the CVE record)
    ("1.17.5-1", {"disable-cuda-compat-lib-hook": True}),
    ("1.17.7", {"disable-cuda-compat-lib-hook": True}),
    ("1.17.8", {}),
    ("1.20.0", {}),
    ("", {}),
    (None, {}),
])
def test_cve_2025_23266_mitigation(version, expected):
    assert _toolkit_config.mitigations(version) == expected


def test_module_applies_the_mitigation_unless_the_user_set_the_flag(run_module, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(DEFAULT)
    args = {"path": str(path), "record": str(tmp_path / "record.json"), "backup": False, "toolkit_version": "1.17.7"}
    assert run_module(nvidia_container_toolkit_config, args)["changed"]
    assert tomllib.loads(path.read_text())["features"] == {"disable-cuda-compat-lib-hook": True}
    args["features"] = {"disable-cuda-compat-lib-hook": False}
    run_module(nvidia_container_toolkit_config, args)
    assert tomllib.loads(path.read_text())["features"] == {"disable-cuda-compat-lib-hook": False}
    args = {"path": str(path), "record": str(tmp_path / "record.json"), "state": "absent", "backup": False}
    run_module(nvidia_container_toolkit_config, args)
    assert path.read_text() == DEFAULT


def test_the_role_variable_is_checked_with_its_own_names():
    assert _toolkit_config.role_settings_errors({}) == []
    assert _toolkit_config.role_settings_errors({"runtime_mode": "cdi", "no_cgroups": True}) == []
    assert _toolkit_config.role_settings_errors({"runtime_mode": "gpu", "mode": "cdi"}) == [
        "nvidia_container_toolkit_settings: mode is not a toolkit setting; choose from runtime_mode, "
        "accept_envvar_when_unprivileged, accept_volume_mounts, no_cgroups, features",
        "nvidia_container_toolkit_settings: runtime_mode 'gpu': choose auto, legacy, cdi, csv, jit-cdi "
        "(nvidia-container-runtime.mode)",
    ]
    assert _toolkit_config.role_settings_errors(["x"]) == ["nvidia_container_toolkit_settings must be a mapping, not ['x']"]

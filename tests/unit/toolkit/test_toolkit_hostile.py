# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_container_runtime and nvidia_cdi_spec against hostile and broken input (issue #16): every class refused,
naming the option and the value, no traceback, every file byte for byte as it was, no temporary file left."""

from __future__ import annotations

import os
import stat
import typing as t

import pytest

import hostile

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _toolkit
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_cdi_spec, nvidia_container_runtime

DAEMON = '{\n    "log-driver": "journald"\n}\n'
CONTAINERD = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
PATH_CASES = hostile.text_classes("control", "non_ascii", "empty", "huge") + [
    ("relative", "etc/docker/daemon.json"),
    ("traversal", "/etc/docker/../../tmp/daemon.json"),
    ("dot", "/etc/./docker/daemon.json"),
    ("trailing-slash", "/etc/docker/daemon.json/"),
    ("long-component", "/" + "n" * 300),
]


@pytest.fixture
def host(tmp_path: t.Any) -> dict[str, str]:
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "daemon.json").write_text(DAEMON)
    (tmp_path / "containerd" / "conf.d").mkdir(parents=True)
    (tmp_path / "containerd" / "config.toml").write_text(CONTAINERD)
    (tmp_path / "crio").mkdir()
    (tmp_path / "remote-tmp").mkdir()
    (tmp_path / "bin").mkdir()
    return {
        "ctk": _ctk(str(tmp_path / "bin")),
        "root": str(tmp_path),
        "docker": str(tmp_path / "docker" / "daemon.json"),
        "containerd": str(tmp_path / "containerd" / "config.toml"),
        "dropin": str(tmp_path / "containerd" / "conf.d" / "99-nvidia.toml"),
        "crio": str(tmp_path / "crio" / "99-nvidia.conf"),
        "tmp": str(tmp_path / "remote-tmp"),
    }


def runtime(run_module: t.Any, host: dict[str, str], engine: str = "docker", check_mode: bool = False, **args: t.Any) -> dict[str, t.Any]:
    full: dict[str, t.Any] = {"runtime": engine, "path": host[engine], "_ansible_remote_tmp": host["tmp"]}
    if engine == "containerd":
        full["dropin"] = host["dropin"]
    full.update(args)
    return run_module(nvidia_container_runtime, full, check_mode=check_mode)


def refused(result: dict[str, t.Any], host: dict[str, str], before: dict[str, t.Any], option: str, value: t.Any = None,
            show_value: bool = True) -> None:
    hostile.assert_refused(result, option, value, before=before, roots=[host["root"]], show_value=show_value)


# -- nvidia_container_runtime ----------------------------------------------------------------------------------
NAME_CASES = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge") + [
    ("upper-case", "NVIDIA"),
    ("leading-dash", "-nvidia"),
    ("trailing-dash", "nvidia-"),
    ("dotted", "nvidia.v2"),
    ("underscore", "nvidia_cdi"),
    ("too-long", "n" * 64),
    ("reserved", "runc"),
    ("table-injection", 'x]\n[plugins."evil"'),
]


@pytest.mark.parametrize("engine", ["docker", "containerd", "crio"])
@pytest.mark.parametrize("value", [v for _i, v in NAME_CASES], ids=[i for i, _v in NAME_CASES])
def test_runtime_names_refused_for_every_engine(run_module, host, engine, value):
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, engine, name=value), host, before, "name", value)


@pytest.mark.parametrize("engine", ["docker", "containerd", "crio"])
def test_runtime_name_of_the_wrong_type(run_module, host, engine):
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, engine, name=["nvidia"]), host, before, "name", "['nvidia']")


@pytest.mark.parametrize("option", ["path", "runtime_path"])
@pytest.mark.parametrize("engine", ["docker", "containerd", "crio"])
@pytest.mark.parametrize("value", [v for _i, v in PATH_CASES], ids=[i for i, _v in PATH_CASES])
def test_path_options_refused(run_module, host, option, engine, value):
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, engine, **{option: value}), host, before, option, value)


@pytest.mark.parametrize("value", ["/usr/bin/nvidia container runtime", "/usr/bin/x\ty"])
def test_runtime_path_with_whitespace_refused(run_module, host, value):
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, runtime_path=value), host, before, "runtime_path", value)


DROPIN_CASES = [v for _i, v in PATH_CASES] + [
    "/etc/containerd/conf.d/99-nvidia.conf", "/etc/conta*rd/conf.d/99-nvidia.toml", "/etc/containerd/conf[1].d/x.toml"]


@pytest.mark.parametrize("value", DROPIN_CASES, ids=[i for i, _v in PATH_CASES] + ["not-toml", "glob-star", "glob-class"])
def test_dropin_refused(run_module, host, value):
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, "containerd", dropin=value), host, before, "dropin", value)


def test_dropin_that_is_the_main_config_is_refused(run_module, host):
    os.rename(host["containerd"], host["containerd"] + ".toml")
    main = host["containerd"] + ".toml"
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, "containerd", path=main, dropin=main), host, before, "dropin", main)


@pytest.mark.parametrize("value", [-1, 0, 1, 4, 10 ** 20], ids=["negative", "zero", "one", "four", "huge"])
def test_config_version_refused(run_module, host, value):
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, "containerd", config_version=value), host, before, "config_version", value)


def test_config_version_of_the_wrong_type(run_module, host):
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, "containerd", config_version="two"), host, before, "config_version", show_value=False)


def _toml_specials(root: str) -> dict[str, str]:
    """The special cases with names that end with .toml, as a drop-in's must."""
    special = hostile.make_special_cases(root)
    os.mkdir(os.path.join(root, "dir.toml"))
    os.symlink(os.path.join(root, "nowhere.toml"), os.path.join(root, "dangling.toml"))
    os.mkfifo(os.path.join(root, "fifo.toml"))
    os.symlink(os.path.join(root, "loop2.toml"), os.path.join(root, "loop1.toml"))
    os.symlink(os.path.join(root, "loop1.toml"), os.path.join(root, "loop2.toml"))
    return {
        "directory": os.path.join(root, "dir.toml"),
        "under_file": special["under_file"][:-len("x.conf")] + "x.toml",
        "dangling_link": os.path.join(root, "dangling.toml"),
        "fifo": os.path.join(root, "fifo.toml"),
        "link_loop": os.path.join(root, "loop1.toml"),
        "under_dangling_link": special["under_dangling_link"][:-len("x.conf")] + "x.toml",
    }


@pytest.mark.parametrize("option", ["path", "dropin"])
@pytest.mark.parametrize("kind", hostile.SPECIAL_KINDS)
@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
def test_unusable_files_refused_containerd(run_module, host, option, kind, check_mode):
    value = _toml_specials(host["root"])[kind]
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, "containerd", check_mode=check_mode, **{option: value}), host, before, option, value)


@pytest.mark.parametrize("engine", ["docker", "crio"])
@pytest.mark.parametrize("kind", hostile.SPECIAL_KINDS)
def test_unusable_files_refused(run_module, host, engine, kind):
    value = hostile.make_special_cases(host["root"])[kind]
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, engine, path=value), host, before, "path", value)


BROKEN_CONTAINERD = [
    ("cri-plugin-is-a-string", 'version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = "oops"\n', 'plugins."io.containerd.grpc.v1.cri"'),
    ("plugins-is-a-string", 'version = 2\nplugins = "oops"\n', "plugins must be a table"),
    ("containerd-is-a-number", 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd = 1\n', 'plugins."io.containerd.grpc.v1.cri".containerd'),
    ("runtimes-is-a-list", 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = [1]\n', ".containerd.runtimes must be a table"),
    ("runc-is-a-string", 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\nrunc = "x"\n', ".runtimes.runc must be a table"),
    ("options-is-a-string", 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\noptions = "x"\n', ".runc.options must be a table"),
    ("our-runtime-is-a-string", 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\nnvidia = "x"\n', ".runtimes.nvidia must be a table"),
    ("runtime-type-is-a-number", 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\nruntime_type = 1\n',
     "runtime_type must be a string"),
    ("version-is-a-string", 'version = "2"\n', "has config version '2'"),
    ("version-is-a-boolean", "version = true\n", "has config version True"),
    ("imports-is-a-string", 'version = 2\nimports = "/etc/x/*.toml"\n', "imports must be a list of paths"),
    ("imports-holds-a-number", "version = 2\nimports = [1]\n", "imports must be a list of paths"),
    ("a-date-in-runc-options", 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nWhen = 1979-05-27\n',
     "cannot write a date"),
    ("not-toml", "version = = 2\n", "is not valid TOML"),
]


@pytest.mark.parametrize("content, message", [c[1:] for c in BROKEN_CONTAINERD], ids=[c[0] for c in BROKEN_CONTAINERD])
@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
def test_containerd_config_it_cannot_merge_is_refused_naming_file_and_key(run_module, host, content, message, check_mode):
    with open(host["containerd"], "w", encoding="utf-8") as handle:
        handle.write(content)
    before = hostile.snapshot(host["root"])
    result = runtime(run_module, host, "containerd", check_mode=check_mode)
    refused(result, host, before, host["containerd"], show_value=False)
    assert message in result["msg"], result["msg"]


BROKEN_DOCKER = [
    ("runtime-entry-is-a-string", '{"runtimes": {"nvidia": "/usr/bin/x"}}', '"runtimes"."nvidia" must be a JSON object'),
    ("runtimes-is-a-list", '{"runtimes": []}', '"runtimes" must be a JSON object'),
    ("a-list", "[]", "must hold a JSON object"),
    ("not-json", "{", "is not valid JSON"),
]


@pytest.mark.parametrize("content, message", [c[1:] for c in BROKEN_DOCKER], ids=[c[0] for c in BROKEN_DOCKER])
def test_daemon_json_it_cannot_merge_is_refused(run_module, host, content, message):
    with open(host["docker"], "w", encoding="utf-8") as handle:
        handle.write(content)
    before = hostile.snapshot(host["root"])
    result = runtime(run_module, host)
    refused(result, host, before, host["docker"], show_value=False)
    assert message in result["msg"]


@pytest.mark.parametrize("engine", ["docker", "containerd"])
def test_file_that_is_not_utf8_is_refused(run_module, host, engine):
    with open(host[engine], "wb") as handle:
        handle.write(b'{"a": "\xff"}\n' if engine == "docker" else b'version = 2\n# \xff\n')
    before = hostile.snapshot(host["root"])
    refused(runtime(run_module, host, engine), host, before, host[engine], show_value=False)


def test_a_good_request_still_writes_and_leaves_no_temporary_file(run_module, host):
    result = runtime(run_module, host, "containerd", name="nvidia-cdi")
    assert result["changed"] and not result.get("failed")
    assert sorted(os.listdir(os.path.dirname(host["dropin"]))) == ["99-nvidia.toml"]
    assert all(not n.startswith(".") for n in os.listdir(os.path.dirname(host["containerd"])))


# -- nvidia_cdi_spec --------------------------------------------------------------------------------------------
def _ctk(directory: str, body: str = "") -> str:
    path = os.path.join(directory, "nvidia-ctk")
    with open(path, "w", encoding="ascii") as handle:
        handle.write(body or "#!/bin/sh\nexit 0\n")
    os.chmod(path, 0o755)
    return path


def cdi(run_module: t.Any, host: dict[str, str], check_mode: bool = False, **args: t.Any) -> dict[str, t.Any]:
    full: dict[str, t.Any] = {"dir": os.path.join(host["root"], "cdi"), "record": os.path.join(host["root"], "state", "cdi.json"),
                              "facts": {"state": "ok"}, "_ansible_remote_tmp": host["tmp"]}
    full.update(args)
    return run_module(nvidia_cdi_spec, full, check_mode=check_mode)


FILENAME_CASES = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge") + [
    ("parent", "../evil.yaml"),
    ("deeper-parent", "../../etc/cron.d/evil.yaml"),
    ("absolute", "/etc/evil.yaml"),
    ("subdirectory", "sub/nvidia.yaml"),
    ("dot", "."),
    ("dot-dot", ".."),
    ("hidden", ".nvidia.yaml"),
    ("suffix-only", ".yaml"),
    ("wrong-suffix", "nvidia.yml"),
    ("no-suffix", "nvidia"),
    ("text", "nvidia.txt"),
]


@pytest.mark.parametrize("value", [v for _i, v in FILENAME_CASES], ids=[i for i, _v in FILENAME_CASES])
@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
def test_cdi_filename_refused(run_module, host, value, check_mode):
    before = hostile.snapshot(host["root"])
    refused(cdi(run_module, host, check_mode=check_mode, filename=value, nvidia_ctk=host["ctk"]), host, before,
            "filename", value)


@pytest.mark.parametrize("option", ["dir", "record", "nvidia_ctk"])
@pytest.mark.parametrize("value", [v for _i, v in PATH_CASES], ids=[i for i, _v in PATH_CASES])
def test_cdi_path_options_refused(run_module, host, option, value):
    if option == "dir" and value.endswith("daemon.json/"):
        value = value[:-1] + "/../x"
    before = hostile.snapshot(host["root"])
    refused(cdi(run_module, host, **{option: value}), host, before, option, value)


@pytest.mark.parametrize("value", [v for _i, v in PATH_CASES if not v.endswith("/")], ids=[i for i, v in PATH_CASES if not v.endswith("/")])
def test_cdi_other_dirs_refused(run_module, host, value):
    before = hostile.snapshot(host["root"])
    refused(cdi(run_module, host, other_dirs=["/var/run/cdi", value]), host, before, "other_dirs[1]", value)


VERSION_CASES = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "huge") + [
    ("negative", "-1"), ("word", "latest"), ("injection", "1.18.0\nPin-Priority: 1001"), ("wildcard", "1.*"),
]


@pytest.mark.parametrize("value", [v for _i, v in VERSION_CASES], ids=[i for i, _v in VERSION_CASES])
def test_cdi_toolkit_version_refused(run_module, host, value):
    before = hostile.snapshot(host["root"])
    refused(cdi(run_module, host, toolkit_version=value), host, before, "toolkit_version", value)


@pytest.mark.parametrize("value", [v for _i, v in VERSION_CASES], ids=[i for i, _v in VERSION_CASES])
def test_toolkit_role_version_refused(value):
    errors = _toolkit.request_errors({"version": value})
    assert errors and "nvidia_container_toolkit_version %r" % value in errors[0]


@pytest.mark.parametrize("option", ["dir", "record"])
@pytest.mark.parametrize("kind", hostile.SPECIAL_KINDS)
@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
def test_cdi_unusable_paths_refused(run_module, host, option, kind, check_mode):
    special = hostile.make_special_cases(host["root"])
    value = special[kind if not (option == "dir" and kind == "directory") else "under_file"]
    if option == "dir" and kind == "under_file":
        value = os.path.join(host["root"], "a-file")  # a file where the directory belongs
    before = hostile.snapshot(host["root"])
    refused(cdi(run_module, host, check_mode=check_mode, nvidia_ctk=host["ctk"], **{option: value}), host, before, option, value)


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling_link"])
def test_cdi_spec_path_that_is_not_a_file_is_refused(run_module, host, kind):
    spec_dir = os.path.join(host["root"], "cdi")
    os.mkdir(spec_dir)
    spec = os.path.join(spec_dir, "nvidia.yaml")
    {"directory": lambda: os.mkdir(spec), "fifo": lambda: os.mkfifo(spec),
     "dangling_link": lambda: os.symlink(os.path.join(spec_dir, "gone.yaml"), spec)}[kind]()
    before = hostile.snapshot(host["root"])
    refused(cdi(run_module, host, nvidia_ctk=host["ctk"]), host, before, spec, show_value=False)


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling_link"])
def test_cdi_duplicate_that_is_not_a_file_is_refused(run_module, host, kind):
    other = os.path.join(host["root"], "run-cdi")
    os.mkdir(other)
    duplicate = os.path.join(other, "nvidia.yaml")
    {"directory": lambda: os.mkdir(duplicate), "fifo": lambda: os.mkfifo(duplicate),
     "dangling_link": lambda: os.symlink(os.path.join(other, "gone.yaml"), duplicate)}[kind]()
    before = hostile.snapshot(host["root"])
    refused(cdi(run_module, host, other_dirs=[other], nvidia_ctk=host["ctk"]), host, before, duplicate, show_value=False)


def test_cdi_other_dir_that_is_a_file_is_refused(run_module, host):
    special = hostile.make_special_cases(host["root"])
    before = hostile.snapshot(host["root"])
    refused(cdi(run_module, host, other_dirs=[os.path.join(host["root"], "a-file")]), host, before, "other_dirs",
            os.path.join(host["root"], "a-file"))
    assert special


def test_missing_nvidia_ctk_says_so_and_how_to_install_it(run_module, host):
    before = hostile.snapshot(host["root"])
    result = cdi(run_module, host)
    refused(result, host, before, "nvidia-ctk is missing", show_value=False)
    assert "install nvidia-container-toolkit-base" in result["msg"]
    assert "Error executing command" not in result["msg"]


@pytest.mark.parametrize("kind", ["missing", "not-executable", "directory", "dangling_link"])
def test_nvidia_ctk_that_cannot_run_is_refused(run_module, host, kind):
    special = hostile.make_special_cases(host["root"])
    path = {"missing": os.path.join(host["root"], "nvidia-ctk"), "directory": special["directory"],
            "dangling_link": special["dangling_link"]}.get(kind)
    if kind == "not-executable":
        path = _ctk(host["root"])
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
        if os.access(path, os.X_OK):
            pytest.skip("running as a user who may execute anything")
    before = hostile.snapshot(host["root"])
    result = cdi(run_module, host, nvidia_ctk=path)
    refused(result, host, before, "nvidia_ctk", path)
    assert "install nvidia-container-toolkit-base" in result["msg"]
    assert "Error executing command" not in result["msg"]


@pytest.mark.parametrize("facts", [{"gpus": "x"}, {"gpus": [1, "a", None]}, {"driver": "x", "gpus": [{"index": 0, "mig": "on",
                                                                                                      "mig_devices": "x"}]}])
@pytest.mark.parametrize("check_mode", [True, False])
def test_cdi_odd_facts_are_refused_by_name_before_anything_runs(run_module, host, facts, check_mode):
    # Facts of the wrong type are named under the facts option (#37), in check mode too, before nvidia-ctk runs.
    before = hostile.snapshot(host["root"])
    result = cdi(run_module, host, facts=facts, nvidia_ctk=host["ctk"], check_mode=check_mode)
    assert result.get("failed") is True and result["msg"].startswith("facts: facts.") and "Traceback" not in result["msg"], result
    assert hostile.snapshot(host["root"]) == before


@pytest.mark.parametrize("key, value", [
    ("repo_url", "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)\nTrusted: yes"),
    ("repo_url", "https://example.com/repo with space"),
    ("repo_url", "ftp://example.com/repo"),
    ("repo_url", "https://ex\u00e4mple.com/"),
    ("repo_key_url", "https://example.com/key.gpg\r\n"),
    ("repo_key_fingerprint", "C95B321B61E88C1809C4F759DDCAE044F796ECB0\nx"),
    ("repo_key_fingerprint", "not-hex"),
    ("runtime_name", "Nvidia"),
])
def test_toolkit_role_repository_values_refused_when_given(key, value):
    errors = _toolkit.request_errors({key: value})
    assert errors and errors[0].startswith("nvidia_container_toolkit_%s: %r" % (key, value))


def test_toolkit_role_repository_values_accepted():
    assert _toolkit.request_errors({"repo_url": "https://nvidia.github.io/libnvidia-container/stable/deb/amd64",
                                    "repo_key_url": "file:///srv/gpuhost-repos/key/public.asc",
                                    "repo_key_fingerprint": "C95B 321B 61E8 8C18 09C4  F759 DDCA E044 F796 ECB0".replace("  ", " "),
                                    "runtime_name": "nvidia"}) == []

# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""kubelet_registration: labels and taints merged into the kubelet's environment file or drop-in directory."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _kubelet
from ansible_collections.gpuhost.nvidia.plugins.modules import kubelet_registration

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def sha(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


@pytest.fixture
def kubelet(tmp_path, run_module):
    env = tmp_path / "default" / "kubelet"
    env.parent.mkdir()

    def run(check_mode=False, **args):
        args.setdefault("env_file", str(env))
        args.setdefault("record", str(tmp_path / "state" / "kubelet_registration.json"))
        return run_module(kubelet_registration, args, check_mode=check_mode)

    run.env = env
    run.tmp = tmp_path
    return run


# ------------------------------------------------------------------------------------------------ label rules
# Kubernetes' own examples of valid and invalid qualified names and label values (apimachinery
# pkg/util/validation/validation_test.go TestIsQualifiedName / TestIsValidLabelValue, the same classes).
@pytest.mark.parametrize("key", ["simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple", "now-with-dashes/simple",
                                 "now-with-dashes/now-with-dashes", "now.with.dots/simple", "now-with.dashes-and.dots/simple",
                                 "1-num.2-num/3-num", "1234/5678", "1.2.3.4/5678", "Uppercase_Is_OK_123", "example.com/Uppercase_Is_OK_123",
                                 "requests.storage-foo", "a" * 63, "a" * 253 + "/" + "b" * 63])
def test_valid_qualified_names(key):
    assert _kubelet.qualified_name_error(key) is None


@pytest.mark.parametrize("key", ["nospecialchars%^=@", "cantendwithadash-", "-cantstartwithadash-", "only/one/slash", "Example.com/abc",
                                 "example_com/abc", "example.com/", "/simple", "a" * 64, "a" * 254 + "/abc", "", "a b", "x\n", "é/x", 5, None])
def test_invalid_qualified_names(key):
    assert _kubelet.qualified_name_error(key)


@pytest.mark.parametrize("value", ["", "simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "a" * 63,
                                   "ada-lovelace", "NVIDIA-H100-80GB-HBM3"])
def test_valid_label_values(value):
    assert _kubelet.label_value_error(value) is None


@pytest.mark.parametrize("value", ["nospecialchars%^=@", "Tama-nui-te-rā.is.Māori.sun", "\\backslashes\\are\\bad", "-starts-with-dash",
                                   "ends-with-dash-", ".starts.with.dot", "ends.with.dot.", "a" * 64, "ada lovelace", "true\n", 1, True])
def test_invalid_label_values(value):
    assert _kubelet.label_value_error(value)


# k8s.io/kubelet pkg/apis/well_known_labels.go (IsKubeletLabel) and the NodeRestriction admission plugin.
@pytest.mark.parametrize("key", ["nvidia.com/gpu", "accelerator", "example.com/gpu-pool", "kubernetes.io/hostname", "kubernetes.io/arch",
                                 "topology.kubernetes.io/zone", "node.kubernetes.io/instance-type", "kubelet.kubernetes.io/x",
                                 "foo.node.kubernetes.io/gpu", "foo.kubelet.kubernetes.io/gpu", "node.kubernetes.io/windows-build",
                                 "beta.kubernetes.io/arch", "failure-domain.beta.kubernetes.io/zone", "notkubernetes.io/x"])
def test_labels_a_kubelet_may_set(key):
    assert _kubelet.kubelet_label_error(key) is None


@pytest.mark.parametrize("key", ["node-restriction.kubernetes.io/gpu", "example.node-restriction.kubernetes.io/x",
                                 "node-role.kubernetes.io/gpu", "kubernetes.io/role", "k8s.io/x", "foo.k8s.io/x",
                                 "example.kubernetes.io/x", "failure-domain.kubernetes.io/zone"])
def test_labels_a_kubelet_may_not_set(key):
    assert "kubelet" in _kubelet.kubelet_label_error(key) or "NodeRestriction" in _kubelet.kubelet_label_error(key)


@pytest.mark.parametrize("taint, problem", [
    ({"key": "nvidia.com/gpu", "effect": "NoSchedul"}, "effect"),
    ({"key": "nvidia.com/gpu", "value": "a b", "effect": "NoSchedule"}, "value"),
    ({"key": "bad key", "effect": "NoSchedule"}, "key"),
    ({"key": "x", "effect": "NoSchedule", "extra": 1}, "unknown fields"),
    ("nvidia.com/gpu=true:NoSchedule", "mapping"),
])
def test_bad_taints(taint, problem):
    assert problem in " ".join(_kubelet.check_taints([taint]))


def test_repeated_taint_is_refused():
    assert "repeats" in " ".join(_kubelet.check_taints([GPU_TAINT, dict(GPU_TAINT, value="false")]))


# ------------------------------------------------------------------------------------------------ the module
def test_fresh_file_is_created_and_second_run_changes_nothing(kubelet):
    args = {"labels": {"nvidia.com/gpu": "true", "accelerator": "nvidia-tesla-a100"}, "taints": [GPU_TAINT]}
    predicted = kubelet(check_mode=True, **args)
    assert predicted["changed"] and not kubelet.env.exists()
    first = kubelet(**args)
    assert first["changed"] and first["files"] == predicted["files"] == [str(kubelet.env)]
    assert kubelet.env.read_text() == (
        'KUBELET_EXTRA_ARGS="--node-labels=nvidia.com/gpu=true,accelerator=nvidia-tesla-a100 '
        '--register-with-taints=nvidia.com/gpu=true:NoSchedule"\n')
    assert first["taints"] == ["nvidia.com/gpu=true:NoSchedule"]
    second = kubelet(**args)
    assert not second["changed"] and second["files"] == []
    assert not kubelet(check_mode=True, **args)["changed"]


def test_merges_with_the_users_flags_and_lines(kubelet):
    kubelet.env.write_text('# kubeadm\nKUBELET_EXTRA_ARGS="--max-pods=50 --node-labels=team=ml,accelerator=old '
                           '--register-with-taints=dedicated=ml:NoExecute"\nOTHER=1\n')
    before = sha(kubelet.env)
    result = kubelet(labels={"accelerator": "nvidia-tesla-v100"}, taints=[GPU_TAINT])
    assert kubelet.env.read_text() == (
        '# kubeadm\nKUBELET_EXTRA_ARGS="--max-pods=50 --node-labels=team=ml,accelerator=nvidia-tesla-v100 '
        '--register-with-taints=dedicated=ml:NoExecute,nvidia.com/gpu=true:NoSchedule"\nOTHER=1\n')
    assert result["labels"] == {"team": "ml", "accelerator": "nvidia-tesla-v100"}
    # absent gives the replaced label its original value back and restores the file byte for byte
    predicted = kubelet(check_mode=True, labels={"accelerator": "nvidia-tesla-v100"}, taints=[GPU_TAINT], state="absent")
    assert predicted["changed"]
    removed = kubelet(labels={"accelerator": "nvidia-tesla-v100"}, taints=[GPU_TAINT], state="absent")
    assert removed["changed"] and removed["labels"] == {"team": "ml", "accelerator": "old"}
    assert sha(kubelet.env) == before
    assert not kubelet(state="absent", labels={"accelerator": "nvidia-tesla-v100"}, taints=[GPU_TAINT])["changed"]


def test_absent_removes_a_file_it_created(kubelet):
    kubelet(labels={"nvidia.com/gpu": "true"})
    assert kubelet.env.exists()
    kubelet(labels={"nvidia.com/gpu": "true"}, state="absent")
    assert not kubelet.env.exists()
    assert not (kubelet.tmp / "state" / "kubelet_registration.json").exists()


@pytest.mark.parametrize("text", [
    'KUBELET_EXTRA_ARGS="--node-labels=a=$(reboot)"\n',
    "KUBELET_EXTRA_ARGS='--v=2' --x\n",
    'KUBELET_EXTRA_ARGS="--node-labels a=b"\n',
    'KUBELET_EXTRA_ARGS="--node-labels=a=b --node-labels=c=d"\n',
    'KUBELET_EXTRA_ARGS="--v=2"\nKUBELET_EXTRA_ARGS="--v=3"\n',
    'KUBELET_EXTRA_ARGS="--v=2 \\\n --x"\n',
    'KUBELET_EXTRA_ARGS="--node-labels=bad key=1"\n',
    'KUBELET_EXTRA_ARGS="--register-with-taints=x:Never"\n',
])
def test_files_it_cannot_read_with_certainty_are_left_alone(kubelet, text):
    kubelet.env.write_text(text)
    before = sha(kubelet.env)
    for check_mode in (True, False):
        result = kubelet(check_mode=check_mode, labels={"nvidia.com/gpu": "true"})
        assert result["failed"] and "Nothing was changed" in result["msg"]
    assert sha(kubelet.env) == before
    assert not (kubelet.tmp / "state").exists()


@pytest.mark.parametrize("args, needle", [
    ({"labels": {"node-role.kubernetes.io/gpu": ""}}, "node-role.kubernetes.io/gpu"),
    ({"labels": {"node-restriction.kubernetes.io/gpu": "a"}}, "NodeRestriction"),
    ({"labels": {"nvidia.com/gpu.family": "ada lovelace"}}, "ada lovelace"),
    ({"labels": {"a": "b\nKUBELET_EXTRA_ARGS=--x"}}, "label"),
    ({"taints": [{"key": "nvidia.com/gpu", "value": "true\n", "effect": "NoSchedule"}]}, "taint 1 value"),
    ({"variable": "KUBELET EXTRA"}, "variable"),
    ({"dropin_name": "gpu.yaml", "config_dir": "/tmp"}, "must end with .conf"),
    ({"dropin_name": "../x.conf", "config_dir": "/tmp"}, "dropin_name"),
    ({"env_file": "relative/kubelet"}, "env_file"),
])
def test_hostile_requests_are_refused_before_anything_is_read(kubelet, args, needle):
    for check_mode in (True, False):
        result = kubelet(check_mode=check_mode, **args)
        assert result["failed"] and needle in result["msg"]
    assert not kubelet.env.exists() and not (kubelet.tmp / "state").exists()


def test_a_fifo_at_the_env_file_is_refused(kubelet):
    os.mkfifo(str(kubelet.env))
    result = kubelet(labels={"nvidia.com/gpu": "true"})
    assert result["failed"] and "Nothing was changed" in result["msg"]


# ------------------------------------------------------------------------------------------ --config-dir drop-in
def test_dropin_carries_the_taints_configured_before_it(kubelet, tmp_path):
    confd = tmp_path / "kubelet.conf.d"
    confd.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                                  "registerWithTaints": [{"key": "dedicated", "value": "ml", "effect": "NoExecute"}]}))
    (confd / "10-site.conf").write_text(json.dumps({"kind": "KubeletConfiguration", "maxPods": 50}))
    args = {"config_dir": str(confd), "config_file": str(config), "taints": [GPU_TAINT], "labels": {"nvidia.com/gpu": "true"}}
    result = kubelet(**args)
    dropin = confd / "90-gpuhost-nvidia.conf"
    document = json.loads(dropin.read_text())
    assert document == {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "registerWithTaints": [
        {"key": "dedicated", "value": "ml", "effect": "NoExecute"}, GPU_TAINT]}
    assert result["taints"] == ["dedicated=ml:NoExecute", "nvidia.com/gpu=true:NoSchedule"]
    assert "--register-with-taints" not in kubelet.env.read_text()  # the labels only go to the environment file
    assert not kubelet(**args)["changed"]
    kubelet(state="absent", **args)
    assert not dropin.exists() and not kubelet.env.exists()


def test_a_label_no_longer_asked_for_goes_back_to_its_original(kubelet):
    kubelet.env.write_text('KUBELET_EXTRA_ARGS="--node-labels=accelerator=old"\n')
    kubelet(labels={"accelerator": "nvidia-tesla-a100", "nvidia.com/gpu": "true"}, taints=[GPU_TAINT])
    result = kubelet(labels={"nvidia.com/gpu": "true"})
    assert result["changed"] and result["labels"] == {"accelerator": "old", "nvidia.com/gpu": "true"} and result["taints"] == []
    assert kubelet.env.read_text() == 'KUBELET_EXTRA_ARGS="--node-labels=accelerator=old,nvidia.com/gpu=true"\n'
    kubelet(labels={"nvidia.com/gpu": "true"}, state="absent")
    assert kubelet.env.read_text() == 'KUBELET_EXTRA_ARGS="--node-labels=accelerator=old"\n'

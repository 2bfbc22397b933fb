"""Which cdiVersion each engine release loads: the engines' go.mod/vendor.mod CDI library at each tag, and that
library's CurrentVersion (containerd/containerd, moby/moby, containers/podman, cncf-tags/container-device-interface
git tags, read 2026-11-29; docs/sources.md)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _cdi_compat


@pytest.mark.parametrize("engine, version, expected", [
    ("podman", "4.9.3+ds1-1ubuntu0.2", "0.6.0"),  # Ubuntu 24.04: rejects the toolkit's 0.7.0 specs
    ("podman", "5.4.2+ds1-2", "0.8.0"),  # Debian 13
    ("podman", "4.0.2", None),
    ("containerd", "1.6.20~ds1-1", None),  # no CDI before 1.7
    ("containerd", "1.7.24~ds1-6+b1", "0.7.0"),
    ("containerd", "1.7.27-1", "0.8.0"),
    ("containerd", "2.2.1-0ubuntu1~24.04.2", "1.1.0"),
    ("docker", "5:27.4.0-1~debian.12~bookworm", "0.8.0"),
    ("docker", "26.1.5+dfsg1-9+b9", "0.7.0"),
    ("docker", "26.0.2", "0.6.0"),
    ("docker", "25.0.17", "0.8.0"),
    ("docker", "24.0.9", None),
    ("crio", "1.32.0", None),
])
def test_max_spec_version(engine, version, expected):
    assert _cdi_compat.max_spec_version(engine, version) == expected


def test_rejections_name_the_upgrade():
    out = _cdi_compat.rejections("0.7.0", {"podman": "4.9.3+ds1-1ubuntu0.2", "containerd": "1.7.24~ds1-6"})
    assert out == ["podman 4.9.3 loads CDI specs up to cdiVersion 0.6.0, not 0.7.0: upgrade podman to 5.1.0 or later"]
    assert _cdi_compat.rejections("0.5.0", {"podman": "4.9.3"}) == []
    assert "no docker release known" in _cdi_compat.rejections("9.0.0", {"docker": "27.4.0"})[0]


@pytest.mark.parametrize("text, expected", [
    ("---\ncdiVersion: 0.7.0\nkind: nvidia.com/gpu\n", "0.7.0"),
    ('cdiVersion: "0.5.0"\n', "0.5.0"),
    ('{\n  "cdiVersion": "0.8.0",\n  "kind": "nvidia.com/gpu"\n}\n', "0.8.0"),
    ("kind: nvidia.com/gpu\n", None),
])
def test_spec_version(text, expected):
    assert _cdi_compat.spec_version(text) == expected

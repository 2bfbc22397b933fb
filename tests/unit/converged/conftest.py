# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host and module fixtures of the gpuhost_converged tests that run the module in-process (observe, defer)."""

from __future__ import annotations

import pytest

from ansible.module_utils import basic

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged_host
from ansible_collections.gpuhost.nvidia.plugins.modules import gpuhost_converged


@pytest.fixture(autouse=True)
def boot(monkeypatch):
    """The host's boot id, as the module reads it (``boot["id"]``; None: unreadable). Set it to another boot to reboot."""
    state = {"id": "0b5e6f1a-boot-1"}
    monkeypatch.setattr(_converged_host, "boot_id", lambda *args: state["id"])
    return state


@pytest.fixture
def host(monkeypatch, tmp_path):
    """A host whose dpkg database (``packages``: name -> version) and systemd (``units``: name -> (load, enabled,
    active)) answer from this state; every command run is in ``calls``."""
    state = {"packages": {}, "units": {}, "calls": [], "systemctl_fails": False, "records": tmp_path / "converged"}

    def run_command(self, argv, **kwargs):
        state["calls"].append(argv)
        names = argv[argv.index("--") + 1:]
        if argv[1] == "-W":
            out = "".join("%s\tii \t%s\n" % (name, state["packages"][name]) for name in names if name in state["packages"])
            return (0 if all(name in state["packages"] for name in names) else 1), out, ""
        if argv[1] == "show":
            if state["systemctl_fails"]:
                return 1, "", "Failed to connect to bus: No such file or directory"
            blocks = ["LoadState=%s\nUnitFileState=%s\nActiveState=%s\n" % state["units"].get(name, ("not-found", "", "inactive"))
                      for name in names]
            return 0, "\n".join(blocks), ""
        raise AssertionError(argv)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return state


@pytest.fixture
def module(run_module, host):
    """Run the module on the host: its result without the test harness's keys."""
    def call(args, check_mode=False):
        result = run_module(gpuhost_converged, args, check_mode=check_mode)
        result.pop("_bin_lookups", None)
        return result
    return call

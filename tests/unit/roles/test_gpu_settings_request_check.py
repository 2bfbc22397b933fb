# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_settings' first task: a spec the settings module would refuse, or a path the boot unit cannot take, stops the
role before it reads or changes anything, naming every problem (the role on the controller, check mode, one host per
case). Before, such a spec was written to the file the boot unit applies, with the units, and only the module's call
after them failed."""

from __future__ import annotations

CHECK = "gpuhost.nvidia.gpu_settings : Check the spec and the values that the boot unit and the package names are built from, before changing anything"
# The first task after the check that reads the host: the converged probe, included from the internal common role (an
# include_role task is named without its role; the probe inside it is the common role's).
LATER = ("Probe whether the host is as the role's last full run left it",
         "gpuhost.nvidia.internal_common : Ask whether the host is as the calling role's last full run left it")

CASES = {
    "clocks-reversed": ({"gpu_settings_spec": {"gpus": ["all"], "locked_clocks": {"min_mhz": 1500, "max_mhz": 1200}}},
                        ["gpu_settings_spec: locked_clocks: min_mhz 1500 is above max_mhz 1200."]),
    "one-clock": ({"gpu_settings_spec": {"applications_clocks": {"memory_mhz": 5001}}},
                  ["parameters are required together: memory_mhz, graphics_mhz found in applications_clocks"]),
    "layout-without-mig": ({"gpu_settings_spec": {"mig": False, "mig_layout": [{"profile": "1g.5gb"}]}},
                           ["mig_layout declares MIG instances but mig is false"]),
    "selector-newline": ({"gpu_settings_spec": {"gpus": ["all", "A100\nExecStart=/bin/sh"]}}, ["gpus[1]: ", "holds the control character"]),
    "index-beyond-any-host": ({"gpu_settings_spec": {"gpus": ["64"]}}, ["gpus[0]: '64' is not a GPU index (0 to 63)"]),
    "unknown-key": ({"gpu_settings_spec": {"persistence": True}}, ["unsupported option persistence."]),
    "path-and-spec": ({"gpu_settings_spec_path": "/etc/gpuhost/../x.json", "gpu_settings_spec": {"power_limit": 0}},
                      ["gpu_settings_spec_path: '/etc/gpuhost/../x.json' has a '.' or '..' component", "gpu_settings_spec: power_limit: 0.0 must be above 0."]),
}


def test_a_bad_request_stops_the_role_before_anything_is_read(role_tasks) -> None:
    results = role_tasks("gpuhost.nvidia.gpu_settings", "main.yml", {}, cases={name: variables for name, (variables, _m) in CASES.items()})
    for name, (_variables, messages) in CASES.items():
        tasks = results[name]
        check = tasks[CHECK]
        assert check.get("failed"), (name, check)
        for message in messages:
            assert message in check["msg"], (name, message, check["msg"])
        assert "Nothing was changed" in check["msg"], check["msg"]
        assert not set(LATER) & set(tasks) and role_tasks.reached not in tasks, (name, sorted(tasks))

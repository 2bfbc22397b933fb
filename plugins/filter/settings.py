# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_settings' filters: gpu_settings_spec_errors, gpu_settings_idle_result. Their documentation is in the sidecar
.yml files. Both are the settings module's own code (module_utils/_settings.py), run on the controller."""

from __future__ import annotations

import typing as t

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import guarded, plain
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_settings = module_utils("_settings")


def gpu_settings_spec_errors(spec: t.Any) -> list[str]:
    return list(_settings.spec_errors(plain(spec)))


def gpu_settings_idle_result(facts: t.Any) -> dict[str, t.Any] | None:
    return _settings.idle_result(facts)


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({
            "gpu_settings_spec_errors": gpu_settings_spec_errors,
            "gpu_settings_idle_result": gpu_settings_idle_result,
        })

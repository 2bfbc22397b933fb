#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_driver_host
short_description: Internal. Read, in one call, what the nvidia_driver role plans from on a host
version_added: 0.1.0
description:
  - Internal to the roles C(gpuhost.nvidia.nvidia_driver) and C(gpuhost.nvidia.nvidia_container_toolkit) (their host
    read); no compatibility promise.
  - Read-only. Gathers what the C(gpuhost.nvidia.nvidia_driver) role's plan and its later tasks read from the host - the
    Secure Boot state, a driver installed by NVIDIA's C(.run) installer, the installed packages the role reasons about,
    other repository definitions that name NVIDIA's hosts, the running kernel's headers and whether a repository offers
    their package, and with apt the versions the repositories offer of the role's candidate packages - in one module call
    instead of one remote task each.
  - This is the driver role's host inventory, not GPU facts - those come from M(gpuhost.nvidia.nvidia_gpu_facts). Nothing
    is set as a fact; register the result.
  - The installed packages come from one query of the package database (C(dpkg-query -W), C(rpm -qa) or C(pacman -Q)),
    the role's package manager's first; the others are read only when it lists no package. Only the packages named in
    O(packages) or starting with one of O(package_prefixes) are returned, in the form of C(ansible.builtin.package_facts).
author:
  - gpuhost.nvidia developers (@gpuhost)
attributes:
  check_mode:
    support: full
    description: Reads only, in check mode too.
  diff_mode:
    support: none
    description: Nothing is changed.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with dpkg, rpm or pacman.
options:
  package_manager:
    description:
      - The role's package manager. Its package database is read first, and it answers the headers question
        (C(apt-cache show), C(dnf info), C(pacman -Si)). Any other value reads the databases in the order apt, pacman, rpm
        and asks nothing about headers.
    type: str
    default: ''
  packages:
    description:
      - Names of installed packages to return.
    type: list
    elements: str
    default: []
  package_prefixes:
    description:
      - Return every installed package whose name starts with one of these.
    type: list
    elements: str
    default: []
  mokutil:
    description:
      - Path of mokutil. When it exists, C(mokutil --sb-state) says whether Secure Boot is enabled. Empty asks nothing.
    type: path
    default: /usr/bin/mokutil
  runfile_markers:
    description:
      - Files that NVIDIA's C(.run) installer leaves; those that exist are returned in RV(runfile_install).
    type: list
    elements: path
    default: []
  repo_dirs:
    description:
      - Directories of repository definitions. Their regular files (not hidden, not in subdirectories) with a line that
        contains one of O(repo_mentions) are returned in RV(foreign_repo_files).
    type: list
    elements: path
    default: []
  repo_mentions:
    description:
      - Strings (host names, URLs) that make a repository definition another NVIDIA repository.
    type: list
    elements: str
    default: []
  repo_exclude:
    description:
      - File names (not paths) in O(repo_dirs) that are not looked at - the role's own repository file.
    type: list
    elements: str
    default: []
  headers_dir:
    description:
      - The running kernel's build directory (C(/lib/modules/<release>/build)); empty skips the headers questions.
    type: path
  headers_package:
    description:
      - The package with the running kernel's headers. Asked about only when O(headers_dir) does not exist; empty asks
        nothing.
      - With apt, a plain package name is first looked for among the names APT knows (C(apt-cache --all-names pkgnames));
        one it does not know is not offered, and C(apt-cache show) (which would go on to match the name as a regular
        expression against every package name) is not run.
    type: str
    default: ''
  offered_packages:
    description:
      - With O(package_manager=apt), the packages to ask the repositories about with one C(apt-cache madison), for
        RV(offered). The C(gpuhost.nvidia.nvidia_driver) role asks here about its candidate packages when it adds no
        repository in the run, instead of asking again after its repository step.
      - Only plain names (lower-case letters, digits and C(-)) are asked; apt would read a name with C(.), C(+) or
        another pattern character as a regular expression when no package has it. RV(offered_asked) lists those asked.
    type: list
    elements: str
    default: []
  gpu_operator:
    description:
      - The components (V(driver), V(toolkit)) to look for signs of the GPU Operator's own on this host, as
        M(gpuhost.nvidia.gpu_operator_check) does, in the same call; RV(gpu_operator_refusals) says why each found one
        must not get a second. The C(gpuhost.nvidia.nvidia_driver) role asks for V(driver) and stops on a refusal.
    type: list
    elements: str
    choices: [driver, toolkit]
    default: []
seealso:
  - module: gpuhost.nvidia.nvidia_gpu_facts
  - module: ansible.builtin.package_facts
"""

EXAMPLES = r"""
- name: Read what the driver role plans from
  gpuhost.nvidia.nvidia_driver_host:
    package_manager: apt
    packages: [nvidia-kernel-dkms, nvidia-open-kernel-dkms, linux-image-amd64]
    package_prefixes: [nvidia, libnvidia]
    runfile_markers: [/usr/bin/nvidia-uninstall, /var/lib/nvidia/.manifest]
    repo_dirs: [/etc/apt/sources.list.d]
    repo_mentions: [developer.download.nvidia.com]
    repo_exclude: [gpuhost-nvidia-cuda.sources]
    headers_dir: "/lib/modules/{{ ansible_facts['kernel'] }}/build"
    headers_package: "linux-headers-{{ ansible_facts['kernel'] }}"
  register: driver_host

- name: Show the installed version of the driver
  ansible.builtin.debug:
    msg: "{{ (driver_host.packages['nvidia-kernel-dkms'] | default([{}]) | first).version | default('not installed') }}"
"""

RETURN = r"""
gpu_operator_refusals:
  description: One sentence per component of O(gpu_operator) the GPU Operator runs here, naming what was seen and the
    Operator setting to change; empty when none.
  returned: always
  type: list
  elements: str
  sample: []
gpu_operator_evidence:
  description: What was seen of the GPU Operator's driver and toolkit on the host (empty lists without O(gpu_operator)).
  returned: always
  type: dict
  sample: {"driver": [], "toolkit": []}
packages:
  description:
    - The installed packages named in O(packages) or starting with one of O(package_prefixes), by name, each a list of
      its installed versions in the form of C(ansible.builtin.package_facts) (rpm adds C(epoch), C(release)). A package of
      another architecture than dpkg's own is named C(name:arch).
  returned: always
  type: dict
  sample: {"nvidia-open-kernel-dkms": [{"name": "nvidia-open-kernel-dkms", "version": "535.261.03-1~deb12u1", "arch": "amd64", "source": "apt"}]}
package_database:
  description: The package database that listed the packages (V(apt), V(rpm) or V(pacman)); null when none did.
  returned: always
  type: str
  sample: apt
secure_boot:
  description:
    - Whether Secure Boot is enabled, from a line of C(mokutil --sb-state) that is exactly C(SecureBoot enabled) or
      C(SecureBoot disabled).
    - Null (unknown) when O(mokutil) does not exist or is empty, cannot run, or prints neither line (a machine without
      EFI variables, a container). Unknown is never reported as off.
  returned: always
  type: bool
  sample: false
secure_boot_unknown:
  description: Why RV(secure_boot) is null (mokutil missing, failing, or printing neither state line); null when it is known.
  returned: always
  type: str
  sample: /usr/bin/mokutil does not exist
sb_state:
  description: What C(mokutil --sb-state) printed on standard output; empty without mokutil.
  returned: always
  type: str
  sample: SecureBoot disabled
runfile_install:
  description: The O(runfile_markers) that exist.
  returned: always
  type: list
  elements: str
  sample: [/usr/bin/nvidia-uninstall]
foreign_repo_files:
  description: The repository definitions in O(repo_dirs) that name one of O(repo_mentions), sorted.
  returned: always
  type: list
  elements: str
  sample: [/etc/apt/sources.list.d/cuda-debian12-x86_64.list]
headers_present:
  description: Whether O(headers_dir) exists (a symbolic link counts, as C(ansible.builtin.stat) reports it); null when O(headers_dir) is not given.
  returned: always
  type: bool
  sample: false
headers_offered:
  description:
    - Whether a repository offers O(headers_package) (the package manager's exit status); null when not asked.
    - With apt, false without asking C(apt-cache show) when APT knows no package of that exact name.
  returned: always
  type: bool
  sample: true
offered:
  description:
    - What C(apt-cache madison) printed for RV(offered_asked), one row per offered version - the package name, the
      version and the source, as the fields of its C(|)-separated lines; no row for a name no repository offers.
    - Null when nothing was asked (another package manager, no plain name in O(offered_packages)) or the question failed.
  returned: always
  type: list
  elements: list
  sample: [["nvidia-open-kernel-dkms", "535.261.03-1", "http://deb.debian.org/debian bookworm/contrib amd64 Packages"]]
offered_asked:
  description: The names of O(offered_packages) that RV(offered) answers (empty when RV(offered) is null).
  returned: always
  type: list
  elements: str
  sample: [libcuda1, nvidia-open-kernel-dkms]
"""

import os
import stat
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver_probe, _files, _gpu_operator

C_ENV = {"LC_ALL": "C", "LANGUAGE": "C"}


def run(module: AnsibleModule, argv: list[str]) -> tuple[int, str] | None:
    """Run a read-only command; None when its binary is not on the host."""
    path = module.get_bin_path(argv[0])
    if not path:
        return None
    rc, out, _err = module.run_command([path] + argv[1:], environ_update=C_ENV)
    return rc, out


def installed(module: AnsibleModule, pkg_mgr: str) -> tuple[str | None, dict[str, t.Any]]:
    """The first package database, in the role's order, that lists any package."""
    for database in _driver_probe.database_order(pkg_mgr):
        answer = run(module, _driver_probe.INSTALLED_QUERIES[database])
        if answer is None or answer[0] != 0:
            continue
        packages = _driver_probe.parse_installed(database, answer[1])
        if packages:
            return database, packages
    return None, {}


def offered(module: AnsibleModule, pkg_mgr: str, package: str) -> bool:
    """Whether a repository offers ``package``: the package manager's exit status. apt lists the names it knows first
    (a fraction of apt-cache show's time) and is asked no more when the name is not among them."""
    if _driver_probe.apt_name_check(pkg_mgr, package):
        names = run(module, _driver_probe.APT_KNOWN_NAMES_QUERY + [package])
        if names is not None and names[0] == 0 and _driver_probe.apt_name_unknown(names[1], package):
            return False
    answer = run(module, _driver_probe.HEADERS_QUERIES[pkg_mgr] + [package])
    return answer is not None and answer[0] == 0


def offered_rows(module: AnsibleModule, pkg_mgr: str, names: list[str]) -> tuple[list[list[str]] | None, list[str]]:
    """apt: the repositories' answer about the plain names of ``names`` (``apt-cache madison``), and the names asked;
    None and nothing asked for another package manager, no plain name, or a failed question."""
    asked = _driver_probe.apt_offered_names(names) if pkg_mgr == "apt" else []
    if not asked:
        return None, []
    answer = run(module, _driver_probe.APT_OFFERED_QUERY + asked)
    if answer is None or answer[0] != 0:
        return None, []
    return _driver_probe.parse_offered(answer[1]), asked


def repo_files(directories: list[str], mentions: list[str], exclude: list[str]) -> list[str]:
    """Regular, not hidden files directly in ``directories`` with a line naming one of ``mentions``."""
    found = []
    for directory in directories:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            if name.startswith(".") or name in exclude:
                continue
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
                # Through _files: a FIFO swapped in after the lstat is refused, not opened (it would hang the module).
                data = _files.read_bytes(path, "repo_dirs")
            except (OSError, _files.FileError):
                continue
            if data is None:
                continue
            text = to_text(data, errors="surrogate_or_replace")
            if _driver_probe.mentions_any(text, mentions):
                found.append(path)
    return sorted(found)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "package_manager": {"type": "str", "default": ""},
            "packages": {"type": "list", "elements": "str", "default": []},
            "package_prefixes": {"type": "list", "elements": "str", "default": []},
            "mokutil": {"type": "path", "default": "/usr/bin/mokutil"},
            "runfile_markers": {"type": "list", "elements": "path", "default": []},
            "repo_dirs": {"type": "list", "elements": "path", "default": []},
            "repo_mentions": {"type": "list", "elements": "str", "default": []},
            "repo_exclude": {"type": "list", "elements": "str", "default": []},
            "headers_dir": {"type": "path"},
            "headers_package": {"type": "str", "default": ""},
            "offered_packages": {"type": "list", "elements": "str", "default": []},
            "gpu_operator": {"type": "list", "elements": "str", "default": [], "choices": list(_gpu_operator.COMPONENTS)},
        },
        supports_check_mode=True,
    )
    params = module.params
    paths = [(name, value) for name in ("mokutil", "headers_dir") for value in [params[name]] if value is not None]
    paths += [(name, value) for name in ("runfile_markers", "repo_dirs") for value in params[name]]
    bad = ["%s %r holds a NUL or line-break character; give a plain absolute path" % (name, value) for name, value in paths
           if any(c in value for c in "\x00\n\r")]
    if bad:
        module.fail_json(msg="; ".join(bad), errors=bad)
    pkg_mgr = params["package_manager"] or ""

    # Existence as ansible.builtin.stat reports it (a symbolic link counts, followed or not).
    sb_state, sb_error, sb_rc = "", "", None
    mokutil_found = bool(params["mokutil"]) and os.path.lexists(params["mokutil"])
    if mokutil_found:
        try:
            # mokutil exits non-zero on machines without EFI variables; what it printed is read all the same, and only
            # its two state lines count: anything else leaves the state unknown.
            sb_rc, sb_state, sb_error = module.run_command([params["mokutil"], "--sb-state"], environ_update=C_ENV, handle_exceptions=False)
        except OSError as exc:
            sb_error = str(exc)

    database, packages = installed(module, pkg_mgr)

    headers_present = None
    headers_offered = None
    if params["headers_dir"]:
        headers_present = os.path.lexists(params["headers_dir"])
        if not headers_present and params["headers_package"] and pkg_mgr in _driver_probe.HEADERS_QUERIES:
            headers_offered = offered(module, pkg_mgr, params["headers_package"])
    offered_answer, offered_asked = offered_rows(module, pkg_mgr, params["offered_packages"])
    operator_evidence = _gpu_operator.host_evidence("/") if params["gpu_operator"] else {c: [] for c in _gpu_operator.COMPONENTS}

    module.exit_json(
        changed=False,
        packages=_driver_probe.select_installed(packages, params["packages"], params["package_prefixes"]),
        package_database=database,
        secure_boot=_driver_probe.secure_boot_enabled(mokutil_found, sb_state),
        secure_boot_unknown=_driver_probe.secure_boot_unknown(params["mokutil"] or "mokutil", mokutil_found, sb_rc, sb_state, sb_error),
        sb_state=sb_state,
        runfile_install=[path for path in params["runfile_markers"] if os.path.lexists(path)],
        foreign_repo_files=repo_files(params["repo_dirs"], params["repo_mentions"], params["repo_exclude"]),
        headers_present=headers_present,
        headers_offered=headers_offered,
        offered=offered_answer,
        offered_asked=offered_asked,
        gpu_operator_evidence=operator_evidence,
        gpu_operator_refusals=_gpu_operator.refusals(operator_evidence, params["gpu_operator"]),
    )


if __name__ == "__main__":
    main()

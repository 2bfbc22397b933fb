#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: repository_key
short_description: Install a package repository's signing key, only when its primary fingerprint is the pinned one
version_added: 0.1.0
description:
  - Fetches an OpenPGP public key from O(url) or O(src), checks that it holds exactly one primary key and that this
    key's fingerprint is O(fingerprint), and writes it to O(dest) in one call, atomically, as the binary keyring that
    apt's C(Signed-By) reads or as the armoured key that dnf's C(gpgkey=) and C(pacman-key --add) read (O(format)).
  - A key with another primary fingerprint (or more than one primary key, or none) is refused, naming the expected
    and the found fingerprints, and nothing is written. So is an empty O(fingerprint), since a repository key is
    trusted only when its fingerprint is pinned.
  - When O(dest) already holds exactly the pinned key in O(format), nothing is fetched (unless O(refresh=true)), so a
    converged host makes no download.
  - Without O(url) and O(src) the module only checks that O(dest) holds exactly the pinned key, and fails otherwise;
    it never writes then. Roles that use a repository another role configured check its key this way.
  - The key is parsed in Python (OpenPGP packet framing and version 4, 5 and 6 key fingerprints); C(gpg) is not
    needed on the managed host. Secret keys and packets that a public key does not hold are refused.
  - A key whose primary key has expired, or carries a key revocation signature, is refused, naming the key and the
    date (see O(expiry_warn_days)). So is a key whose primary key may not sign data and whose signing subkeys are all
    expired or revoked. Signatures are read, not verified; apt, dnf and pacman verify them.
  - O(mode), O(owner) and O(group) are checked before anything is written (in check mode too), naming the bad value. A
    mode that lets the group or others write the key, or that sets the setuid, setgid or sticky bit, is refused.
  - O(files) writes the text files that name the key (an apt C(.sources) file with C(Signed-By), an apt preferences
    file) in the same call, only after the key passed the check, so that a repository costs one module call instead
    of one per file.
author:
  - gpuhost.nvidia developers (@gpuhost)
extends_documentation_fragment:
  - ansible.builtin.files
attributes:
  check_mode:
    support: full
    description: Fetches and checks the key as the real run does (a wrong key fails in check mode too), and writes nothing.
  diff_mode:
    support: full
    description: Shows which key O(dest) holds before and after (primary fingerprint, user IDs, a hash of the packets).
  safe_file_operations:
    support: full
    description: Writes through a temporary file in the destination's directory and an atomic move.
  idempotent:
    support: full
    description: A second run with the same options changes nothing and fetches nothing.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
options:
  fingerprint:
    description:
      - The pinned fingerprint of the key's primary key, 40 (version 4 keys) or 64 (version 5 and 6) hex digits.
      - Spacing as C(gpg --fingerprint) prints it (groups of four, two spaces in the middle), lower case and a C(0x)
        prefix are accepted. An empty value is refused.
    type: str
    required: true
  url:
    description:
      - Where to fetch the key, an C(https://), C(http://) or C(file://) URL (C(file:/path) too, as apt writes it).
        A C(file) URL names a file on the managed host.
      - Printable ASCII without whitespace, at most 2048 characters. Mutually exclusive with O(src).
    type: str
  src:
    description: A file on the managed host that holds the key, armoured or binary. Mutually exclusive with O(url).
    type: path
  dest:
    description:
      - The key file to write, for example V(/etc/apt/keyrings/example.gpg) or V(/etc/pki/rpm-gpg/RPM-GPG-KEY-example).
      - Its directory is created (mode C(0755)) when it is missing. A directory, a special file or a symbolic link to
        nothing at O(dest) is refused.
    type: path
    required: true
  format:
    description:
      - V(binary) writes the key's OpenPGP packets, as C(gpg --dearmor) does (apt's C(Signed-By) takes a C(.gpg) file).
      - V(armored) writes an ASCII-armoured key block (dnf's C(gpgkey=file://...), C(rpm --import), C(pacman-key --add),
        and apt's C(Signed-By) with a C(.asc) file).
      - Ignored without O(url) and O(src), where the check accepts either.
    type: str
    choices: [binary, armored]
    default: binary
  refresh:
    description:
      - Fetch the key even when O(dest) already holds the pinned key, and replace O(dest) when the fetched key
        (the same primary key) differs, for example by a renewed expiry date.
    type: bool
    default: false
  expiry_warn_days:
    description:
      - Warn when the key O(dest) holds after the run expires within this many days, naming the key and the date.
        V(0) never warns.
      - An expired key, and a key with a key revocation signature on its primary key, are always refused (apt, dnf
        and pacman reject every package such a key signs), naming the key and the date; an installed key that has
        expired or been revoked is fetched again, since the source may hold its renewal.
    type: int
    default: 30
  timeout:
    description: Seconds to wait for an C(http) or C(https) O(url).
    type: int
    default: 30
  validate_certs:
    description: Check the TLS certificate of an C(https) O(url).
    type: bool
    default: true
  files:
    description:
      - Text files written after the key passed the fingerprint check (never when it failed), each atomically, with
        the same O(mode), O(owner) and O(group) as O(dest); a file whose O(files[].content) is null is removed.
      - Refused without O(url) and O(src) (the check-only call writes nothing), and for a path that is O(dest) or is
        given twice. The directory of each file must exist.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file, an absolute path.
        type: path
        required: true
      content:
        description: The file's whole text; null removes the file.
        type: str
  apt_update:
    description:
      - An apt source file (a deb822 C(.sources) or one-line C(.list) file, usually one of O(files)) whose package lists
        are fetched in the same call when the key or that file changed, as C(apt-get update) does for this one source
        alone (the host's other sources are not fetched again).
      - They are fetched too when O(apt_versions) finds no version of any of its packages (an earlier run stopped
        between writing the file and fetching its lists).
      - In check mode nothing is fetched; RV(lists_pending) says that the real run would fetch them.
    type: path
  apt_versions:
    description:
      - Package names whose versions the lists offer after O(apt_update), returned in RV(versions) (C(apt-cache
        madison)), so that the role can pick a version without another call. Needs O(apt_update).
      - Not asked in check mode when the lists are pending (RV(lists_pending)).
    type: list
    elements: str
    default: []
seealso:
  - name: RFC 9580, OpenPGP
    description: Packet framing (section 4.2), key fingerprints (section 5.5.4) and ASCII armour (section 6).
    link: https://www.rfc-editor.org/rfc/rfc9580
  - name: sources.list(5), Signed-By
    description: apt reads a binary keyring (C(.gpg)) or an armoured key (C(.asc)).
    link: https://manpages.debian.org/bookworm/apt/sources.list.5.en.html
  - module: ansible.builtin.rpm_key
  - module: ansible.builtin.deb822_repository
"""

EXAMPLES = r"""
- name: Install the CUDA repository key for apt, pinned
  gpuhost.nvidia.repository_key:
    url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub
    fingerprint: EB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC
    dest: /etc/apt/keyrings/gpuhost-nvidia-cuda.gpg
    mode: "0644"

- name: Install the key, then (in the same call) the deb822 source signed by it and no apt preferences hold
  gpuhost.nvidia.repository_key:
    url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub
    fingerprint: EB693B3035CD5710E231E123A4B469963BF863CC
    dest: /etc/apt/keyrings/gpuhost-nvidia-cuda.gpg
    mode: "0644"
    files:
      - path: /etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources
        content: |
          Types: deb
          URIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/
          Suites: /
          Signed-By: /etc/apt/keyrings/gpuhost-nvidia-cuda.gpg
      - path: /etc/apt/preferences.d/gpuhost-nvidia-cuda.pref
        content: null
    # fetch that source's lists when it changed, and say which versions of cuda-drivers they offer
    apt_update: /etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources
    apt_versions: [cuda-drivers]
  register: cuda_repository

- name: Install the same key for dnf's gpgkey=
  gpuhost.nvidia.repository_key:
    url: https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/D42D0685.pub
    fingerprint: 610C7B14E068A878070DA4E99CD0A493D42D0685
    dest: /etc/pki/rpm-gpg/RPM-GPG-KEY-gpuhost-nvidia-cuda
    format: armored
    mode: "0644"

- name: Check, without writing, that a keyring another role installed holds the pinned key
  gpuhost.nvidia.repository_key:
    dest: /etc/apt/keyrings/gpuhost-nvidia-cuda.gpg
    fingerprint: EB693B3035CD5710E231E123A4B469963BF863CC
"""

RETURN = r"""
dest:
  description: The key file.
  returned: always
  type: str
  sample: /etc/apt/keyrings/gpuhost-nvidia-cuda.gpg
fingerprint:
  description: The pinned fingerprint, normalised (upper case, no spaces, no C(0x)).
  returned: always
  type: str
  sample: EB693B3035CD5710E231E123A4B469963BF863CC
fingerprints:
  description: The primary key fingerprints O(dest) holds after the run (in check mode, would hold).
  returned: always
  type: list
  elements: str
  sample: [EB693B3035CD5710E231E123A4B469963BF863CC]
fetched:
  description: Whether the key was read from O(url) or O(src) (false when O(dest) already held the pinned key).
  returned: always
  type: bool
  sample: false
format:
  description: The format of O(dest) after the run, V(binary) or V(armored) (null when nothing was written or checked).
  returned: always
  type: str
  sample: binary
key_changed:
  description: Whether O(dest) changed (in check mode, would change); the task's C(changed) also counts O(files).
  returned: always
  type: bool
  sample: true
files:
  description: Each of O(files), in order, with whether it changed (in check mode, would change) and whether it exists after the run.
  returned: always
  type: list
  elements: dict
  sample: [{path: /etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources, changed: true, exists: true}]
lists_updated:
  description: Whether the package lists of O(apt_update) were fetched in this call (never in check mode).
  returned: always
  type: bool
  sample: true
lists_pending:
  description:
    - Check mode only - the real run would fetch the lists of O(apt_update) for a source that is new or changes, or
      whose lists offer none of O(apt_versions), so the versions the repository offers cannot be told yet. A key that
      changes alone leaves the lists as they are asked now.
  returned: always
  type: bool
  sample: false
expires:
  description:
    - When the primary key O(dest) holds after the run (in check mode, would hold) expires, as C(YYYY-MM-DD HH:MM:SS UTC);
      null when it never expires.
  returned: always
  type: str
  sample: 2027-03-01 12:00:00 UTC
versions:
  description:
    - Each of O(apt_versions) with the versions the package lists offer, as C(apt-cache madison) prints them (newest
      first, each once); an empty list for a package no list offers. Empty when the lists are pending.
  returned: always
  type: dict
  sample: {cuda-drivers: [580.95.05-1, 575.57.08-1]}
"""

import os
import re
import time
import typing as t
from urllib.parse import unquote, urlparse

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apt, _files, _gpg, _validate

RULES: dict[str, _validate.Rule] = {
    "url": _gpg.KEY_URL,
    "src": _validate.Path(),
    "dest": _validate.Path(),
    "files": _validate.ListOf(_validate.Fields({"path": _validate.Path()}), max_items=16),
    "apt_update": _validate.Path(space=False),
    "apt_versions": _validate.ListOf(_validate.Identifier(_apt.PACKAGE_NAME_RE, _apt.PACKAGE_NAME), max_items=16),
}
C_ENV = {"LC_ALL": "C", "LANGUAGE": "C"}
# Permission bits a trust anchor must not have: write for group or others, setuid, setgid, sticky.
UNSAFE_KEY_BITS = 0o7022


def key_mode_error(mode: t.Any) -> str | None:
    """Why ``mode`` (already a valid file mode) is unsafe for a key file: whoever can write it decides what apt trusts."""
    bits = _files.mode_bits(mode)
    unsafe = 0
    if bits is not None:
        unsafe = bits & UNSAFE_KEY_BITS
    elif isinstance(mode, str):
        for clause in mode.split(","):
            users = clause[:len(clause) - len(clause.lstrip("ugoa"))]
            for op, perms in re.findall(r"([-+=])([rwxXstugo]*)", clause[len(users):]):
                if op == "-":
                    continue
                # An empty user list is "a" (umask aside); copying u, g or o may copy a write bit.
                if (not users or set(users) & set("goa")) and set(perms) & set("wugo"):
                    unsafe |= 0o022
                if set(perms) & set("st"):
                    unsafe |= 0o7000
    if not unsafe:
        return None
    return ("mode: %r lets the group or others replace the key, or sets the setuid, setgid or sticky bit (%04o): a key "
            "file decides what the package manager trusts; use '0644'" % (mode, unsafe))


def expiry_text(key: _gpg.Key) -> str | None:
    """When the key's primary key expires (the earliest, should a file hold several), None when it never does."""
    expires = [state.expires for state in key.states if state.expires is not None]
    return _gpg.utc(min(expires)) if expires else None


def warn(module: AnsibleModule, key: _gpg.Key, now: float, dest: str) -> None:
    for message in _gpg.key_warnings(key, now, module.params["expiry_warn_days"], dest):
        module.warn(message)


def fetch(module: AnsibleModule, url: str | None, src: str | None) -> tuple[bytes, str]:
    """The key's bytes and a name for it in messages."""
    if src or (url and urlparse(url).scheme == "file"):
        path = src or unquote(urlparse(t.cast(str, url)).path)
        where = src or t.cast(str, url)
        try:
            data = _files.read_bytes(path, "src" if src else "url", max_size=_gpg.MAX_KEY_SIZE)
        except _files.FileError as exc:
            module.fail_json(msg=str(exc), path=exc.path)
        if data is None:
            module.fail_json(msg="the key at %s does not exist" % where)
        return t.cast(bytes, data), where
    response, info = fetch_url(module, t.cast(str, url), timeout=module.params["timeout"])
    if response is None or info.get("status") != 200:
        module.fail_json(msg="cannot fetch the key at %s: %s" % (url, info.get("msg", "no response")), status=info.get("status"))
    data = response.read(_gpg.MAX_KEY_SIZE + 1)
    return data, t.cast(str, url)


def files_error(files: list[dict[str, t.Any]], dest: str, has_source: bool) -> str | None:
    """Why O(files) cannot be written with this call, or None."""
    if not files:
        return None
    if not has_source:
        return "files: only written with url or src (the check-only call writes nothing)"
    paths = [os.path.abspath(item["path"]) for item in files]
    if dest in paths:
        return "files: %s is dest, the key file" % dest
    twice = sorted({path for path in paths if paths.count(path) > 1})
    if twice:
        return "files: %s given twice" % ", ".join(twice)
    return None


def write_files(module: AnsibleModule, files: list[dict[str, t.Any]]) -> tuple[list[dict[str, t.Any]], list[dict[str, t.Any]]]:
    """Write or remove each file (nothing in check mode); each one's outcome and the diffs of those that change."""
    outcomes, diffs = [], []
    for item in files:
        path = os.path.abspath(item["path"])
        try:
            if item["content"] is None:
                before = _files.read_bytes(path, "files")
                if before is not None and not module.check_mode:
                    _files.remove(path, "files")
                changed, exists = before is not None, False
                diff = dict(_files.make_diff(path, before, b""), after_header="%s (absent)" % path)
            else:
                written = _files.write_file(module, path, item["content"].encode("utf-8"), what="files")
                changed, exists, diff = written.changed, True, written.diff
        except _files.FileError as exc:
            module.fail_json(msg=str(exc), path=exc.path)
        outcomes.append({"path": path, "changed": changed, "exists": exists})
        if changed:
            diffs.append(diff)
    return outcomes, diffs


def apt_errors(params: dict[str, t.Any]) -> list[str]:
    """Why O(apt_update) and O(apt_versions) cannot be used as given (nothing read yet)."""
    errors = []
    if params["apt_versions"] and not params["apt_update"]:
        errors.append("apt_versions: needs apt_update, the source whose lists offer the packages")
    if params["apt_update"] is not None:
        problem = _apt.sources_file_error(params["apt_update"])
        if problem:
            errors.append("apt_update: %s" % problem)
        if not (params["url"] or params["src"]):
            errors.append("apt_update: only with url or src (the check-only call fetches nothing)")
    return errors


def run_apt(module: AnsibleModule, argv: list[str], what: str) -> str:
    """Run apt-get or apt-cache; its output, or fail naming ``what``."""
    rc, out, err = module.run_command([module.get_bin_path(argv[0], required=True)] + argv[1:], environ_update=C_ENV)
    if rc != 0:
        module.fail_json(msg="%s failed (%s, exit %d): %s" % (what, " ".join(argv), rc, (err or out).strip()[-2000:]), rc=rc)
    return out


def apt_lists(module: AnsibleModule, result: dict[str, t.Any], source_changed: bool, key_changed: bool) -> None:
    """Fetch O(apt_update)'s lists when its source or key changed, and ask them for O(apt_versions) (into ``result``).

    Check mode fetches nothing: a new or changed source's lists are pending (what they will offer cannot be told), while
    a changed key alone leaves the lists as they are asked now."""
    source, names = module.params["apt_update"], module.params["apt_versions"]

    def fetch() -> None:
        run_apt(module, _apt.lists_update_argv(source), "fetching the package lists of %s" % source)
        result.update(lists_updated=True, changed=True)

    def ask() -> dict[str, list[str]]:
        return _apt.parse_madison(run_apt(module, _apt.madison_argv(names), "asking apt for the versions of %s" % ", ".join(names)), names)

    if source_changed and module.check_mode:
        result["lists_pending"] = True
        return
    if (source_changed or key_changed) and not module.check_mode:
        fetch()
    if not names:
        return
    versions = ask()
    if not any(versions.values()) and not result["lists_updated"]:
        # The lists of an unchanged source offer none of the packages: an earlier run stopped before fetching them.
        if module.check_mode:
            result["lists_pending"] = True
            return
        fetch()
        versions = ask()
    result["versions"] = versions


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            fingerprint=dict(type="str", required=True),
            url=dict(type="str"),
            src=dict(type="path"),
            dest=dict(type="path", required=True),
            format=dict(type="str", choices=list(_gpg.FORMATS), default="binary"),
            refresh=dict(type="bool", default=False),
            expiry_warn_days=dict(type="int", default=30),
            timeout=dict(type="int", default=30),
            validate_certs=dict(type="bool", default=True),
            files=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                content=dict(type="str"),
            )),
            apt_update=dict(type="path"),
            apt_versions=dict(type="list", elements="str", default=[]),
        ),
        mutually_exclusive=[("url", "src")],
        add_file_common_args=True,
        supports_check_mode=True,
    )
    params = module.params
    # Validate (nothing read from the host yet).
    errors = _validate.check(params, RULES)
    problem = _gpg.fingerprint_error(params["fingerprint"])
    if problem:
        errors.insert(0, problem)
    if not 0 <= params["expiry_warn_days"] <= 36500:
        errors.append("expiry_warn_days: %d is not a number of days from 0 (never warn) to 36500" % params["expiry_warn_days"])
    file_errors = _files.file_args_errors(params)
    if not file_errors and params["mode"] is not None and (params["url"] or params["src"]):
        problem = key_mode_error(params["mode"])
        file_errors = [problem] if problem else []
    errors.extend(file_errors)
    if not errors:
        errors = apt_errors(params)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    pinned = _gpg.normalize_fingerprint(params["fingerprint"])
    dest = os.path.abspath(params["dest"])
    problem = files_error(params["files"], dest, bool(params["url"] or params["src"]))
    if problem:
        module.fail_json(msg=problem, errors=[problem])

    # Read what is installed.
    try:
        installed = _gpg.inspect_installed(_files.read_bytes(dest, "dest", max_size=_gpg.MAX_KEY_SIZE))
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    result: dict[str, t.Any] = dict(changed=False, dest=dest, fingerprint=pinned, fingerprints=installed.fingerprints, fetched=False,
                                    format=_gpg.file_format(installed), key_changed=False, files=[], lists_updated=False,
                                    lists_pending=False, versions={}, expires=expiry_text(installed.key) if installed.key else None)
    now = time.time()

    # Without a source: only check.
    if not (params["url"] or params["src"]):
        problem = _gpg.verify_error(installed, pinned, dest, now)
        if problem:
            module.fail_json(msg="%s. Nothing was installed." % problem, **result)
        warn(module, t.cast(_gpg.Key, installed.key), now, dest)
        module.exit_json(**result)

    # Plan: fetch and check the key only when the destination is not already the pinned key (in check mode too: a
    # wrong key fails the prediction as it fails the run).
    try:
        planned = _gpg.plan(installed, pinned, params["format"], params["refresh"], lambda: fetch(module, params["url"], params["src"]), now)
    except _gpg.GpgError as exc:
        module.fail_json(msg="%s. Nothing was installed. Check the URL, or pin the new key's fingerprint." % exc, **result)

    # Act: the directory, then the file (write_file writes nothing in check mode, and applies mode and owner), then the
    # files that name the key, whose directories must be there before anything is written.
    try:
        for item in params["files"]:
            path = os.path.abspath(item["path"])
            if item["content"] is not None and not _files.check_directory(os.path.dirname(path), "files"):
                module.fail_json(msg="files %r: its directory %r does not exist. Nothing was installed." % (path, os.path.dirname(path)), **result)
        missing_dir = not _files.check_directory(os.path.dirname(dest), "dest")
        if missing_dir and not module.check_mode:
            _files.make_dirs(os.path.dirname(dest), "dest")
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    if missing_dir and module.check_mode:
        changed = True  # no directory yet, so no file: write_file cannot even look
    else:
        changed = _files.write_file(module, dest, planned.content, what="dest").changed or missing_dir
    result.update(changed=changed, key_changed=changed, fetched=planned.fetched, fingerprints=planned.key.fingerprints, format=params["format"],
                  expires=expiry_text(planned.key))
    warn(module, planned.key, now, dest)
    result["diff"] = {
        "before": _gpg.describe(installed),
        "after": "format: %s\n%s" % (params["format"], planned.key.describe()),
        "before_header": dest if installed.data is not None else "%s (absent)" % dest,
        "after_header": dest,
    }
    # The files that name the key, now that it passed the check.
    if params["files"]:
        result["files"], diffs = write_files(module, params["files"])
        result["changed"] = changed or any(item["changed"] for item in result["files"])
        result["diff"] = [result["diff"]] + diffs
    # The lists of the source, now that its file and key are written, and the versions they offer.
    if params["apt_update"]:
        source = os.path.abspath(params["apt_update"])
        apt_lists(module, result, any(item["changed"] for item in result["files"] if item["path"] == source), changed)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

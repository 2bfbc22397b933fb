# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Write a rendered file atomically, with a diff, an optional backup and an optional validation of the new content.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Usage from a module::

    result = write_file(module, path, content_bytes, backup=module.params["backup"], validate=check_fn)
    module.exit_json(changed=result.changed, diff=result.diff, backup_file=result.backup_file)

``write_file`` compares the bytes with what is on disk and writes only when they differ. The new content goes to a
temporary file in the destination's directory, is validated there, and replaces the destination with
``module.atomic_move``, which keeps the existing file's mode, owner and SELinux context. In check mode nothing is
written in the destination's directory; ``validate`` then gets a temporary copy in the module's own temporary
directory. When the module has the common file arguments (``add_file_common_args=True``), the requested mode, owner
and group are applied too, and count as a change.
"""

from __future__ import annotations

import os
import tempfile
import typing as t
from dataclasses import dataclass, field

if t.TYPE_CHECKING:  # pragma: no cover
    from ansible.module_utils.basic import AnsibleModule

Validator = t.Callable[[str], None]


@dataclass
class WriteResult:
    """What ``write_file`` did (or, in check mode, would do)."""

    changed: bool
    content_changed: bool
    existed: bool
    diff: dict[str, t.Any] = field(default_factory=dict)
    backup_file: str | None = None


def read_bytes(path: str) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="replace")


def make_diff(path: str, before: bytes | None, after: bytes) -> dict[str, t.Any]:
    """The ``diff`` result key, in the before/after form that the callbacks render."""
    return {
        "before": _text(before),
        "after": _text(after),
        "before_header": path if before is not None else "%s (absent)" % path,
        "after_header": path,
    }


def _temp_copy(directory: str, name: str, content: bytes) -> str:
    fd, tmp = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def _remove(path: str | None) -> None:
    if path and os.path.lexists(path):
        try:
            os.unlink(path)
        except OSError:
            pass


def write_file(
    module: AnsibleModule,
    path: str,
    content: bytes,
    backup: bool = False,
    validate: Validator | None = None,
    validate_unchanged: bool = False,
) -> WriteResult:
    """Make ``path`` hold ``content``. See the module docstring.

    ``validate(tmp_path)`` is called before anything is replaced; it reports a problem by calling
    ``module.fail_json`` (or raising), and the destination is then left untouched. It runs only when the content
    changes, unless ``validate_unchanged`` is set.
    """
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        module.fail_json(msg="The directory %s of %s does not exist" % (directory, path), path=path)
    if os.path.isdir(path):
        module.fail_json(msg="%s is a directory, not a file" % path, path=path)

    before = read_bytes(path)
    content_changed = before != content
    result = WriteResult(changed=content_changed, content_changed=content_changed, existed=before is not None)
    result.diff = make_diff(path, before, content)

    if validate is not None and (content_changed or validate_unchanged):
        # The copy goes next to the destination only when it is about to replace it; otherwise (check mode, or
        # unchanged content) it goes to the module's temporary directory.
        will_move = content_changed and not module.check_mode
        tmp = _temp_copy(directory if will_move else module.tmpdir, os.path.basename(path), content)
        try:
            validate(tmp)
        except BaseException:
            _remove(tmp)
            raise
        if not will_move:
            _remove(tmp)
            tmp = None
    elif content_changed and not module.check_mode:
        tmp = _temp_copy(directory, os.path.basename(path), content)
    else:
        tmp = None

    if content_changed and not module.check_mode and tmp is not None:
        try:
            if backup and before is not None:
                result.backup_file = module.backup_local(path)
            module.atomic_move(tmp, path, unsafe_writes=bool(module.params.get("unsafe_writes")))
        except BaseException:
            _remove(tmp)
            raise
    else:
        _remove(tmp)

    if "mode" in module.params and (before is not None or not module.check_mode):
        file_args = module.load_file_common_arguments(module.params, path=path)
        result.changed = module.set_fs_attributes_if_different(file_args, result.changed, diff=None)
    return result

# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every file a module reads or writes: refusals, reads, atomic writes with a diff, backups, removal.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Usage from a module::

    try:
        before = read_bytes(path, "path")
    except FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    result = write_file(module, path, content_bytes, backup=module.params["backup"], validate=check_fn, what="path")
    module.exit_json(changed=result.changed, diff=result.diff, backup_file=result.backup_file)

Before anything is read or written, the path is inspected (:func:`check_file`, :func:`check_directory`): a
directory where a file belongs, a FIFO, socket or device, a symbolic link to nothing (or a loop), and a path under
something that is not a directory are refused with :class:`FileError`, whose message names the option (``what``)
and the path. A file is read through a non-blocking descriptor that is checked again, so a FIFO swapped in later
cannot hang the module, and files larger than ``MAX_READ`` are refused.

State records: a module that must remember something between runs (the bytes a file held before its first change,
what a CDI spec was generated for, the locked clocks it applied) keeps one JSON object in ``STATE_DIR``, named after
the module, through :func:`read_json_record` and :func:`write_json_record`: one error policy, atomic writes, parent
directories made on the first write, the file removed once the record is empty, nothing touched in check mode. Only a
record that must vanish at reboot lives in ``RUN_STATE_DIR`` (a tmpfs): nvidia_smi_settings' locked clocks, which
the GPU forgets at reboot too. A record found where an earlier release kept it is moved on the next write.

``write_file`` compares the bytes with what is on disk and writes only when they differ. The new content goes to a
temporary file in the destination's directory, is validated there, and replaces the destination with
``module.atomic_move``, which keeps the existing file's mode, owner and SELinux context. The temporary file is
removed on every failure. In check mode nothing is written in the destination's directory; ``validate`` then gets a
temporary copy in the module's own temporary directory. When the module has the common file arguments
(``add_file_common_args=True``), the requested mode, owner and group are applied too, and count as a change.
"""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import re
import stat
import tempfile
import typing as t
from dataclasses import dataclass, field

if t.TYPE_CHECKING:  # pragma: no cover
    from ansible.module_utils.basic import AnsibleModule

Validator = t.Callable[[str], None]
# No configuration file this collection reads is anywhere near this size; a bigger one is not what it seems.
MAX_READ = 32 * 1024 * 1024
# Where the modules keep their state records (see the module docstring).
STATE_DIR = "/var/lib/gpuhost"
RUN_STATE_DIR = "/run/gpuhost"


class FileError(Exception):
    """A path that cannot be used: its message names the option and the path."""

    def __init__(self, what: str, path: str, problem: str):
        self.what = what
        self.path = path
        super().__init__("%s %r %s" % (what, path, problem))


@dataclass
class WriteResult:
    """What ``write_file`` did (or, in check mode, would do)."""

    changed: bool
    content_changed: bool
    existed: bool
    diff: dict[str, t.Any] = field(default_factory=dict)
    backup_file: str | None = None


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


# The common file arguments as AnsibleModule applies them, checked before anything is written: AnsibleModule only
# reads them after the file has been replaced, so a bad mode or an unknown owner would fail with the new file in place.
# An octal mode as a string (three or four digits, as file modes are written), or chmod's symbolic clauses joined by
# commas, in the form AnsibleModule parses them (users, then operator and permissions, one or more times).
OCTAL_MODE_RE = re.compile(r"[0-7]{3,4}")
SYMBOLIC_MODE_RE = re.compile(r"[ugoa]*(?:[-+=](?:[rwxXst]*|[ugo]))+(?:,[ugoa]*(?:[-+=](?:[rwxXst]*|[ugo]))+)*")
# A user or group name as useradd and groupadd accept them by default (and Samba machine accounts' trailing $), or
# a numeric ID.
ACCOUNT_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?")
NUMERIC_ID_RE = re.compile(r"[0-9]{1,20}")
MAX_ID = 2 ** 32 - 2  # (uid_t) -1 means "unchanged" to chown


def mode_error(mode: t.Any, option: str = "mode") -> str | None:
    """Why ``mode`` is not a file mode AnsibleModule can apply (None when it is, or when it is None)."""
    if mode is None:
        return None
    if isinstance(mode, bool) or not isinstance(mode, (int, str)):
        return "%s: %r is a %s, not a file mode: write it as a quoted octal string such as '0644'" % (option, mode, type(mode).__name__)
    if isinstance(mode, int):
        if 0 <= mode <= 0o7777:
            return None
        return ("%s: %r is not a file mode (0 to 0o7777); an unquoted 0644 in YAML is octal, 644 is decimal: quote it, "
                "as '0644'" % (option, mode))
    if OCTAL_MODE_RE.fullmatch(mode) or SYMBOLIC_MODE_RE.fullmatch(mode):
        return None
    return "%s: %r is not a file mode: use an octal string such as '0644' or chmod's symbolic form such as 'u=rw,g=r,o=r'" % (option, mode)


def mode_bits(mode: t.Any) -> int | None:
    """The permission bits an octal ``mode`` sets (None for a symbolic or missing mode). Call after :func:`mode_error`."""
    if isinstance(mode, int) and not isinstance(mode, bool):
        return mode
    if isinstance(mode, str) and OCTAL_MODE_RE.fullmatch(mode):
        return int(mode, 8)
    return None


def account_error(value: t.Any, option: str, lookup: t.Callable[[str], t.Any]) -> str | None:
    """Why ``value`` (an owner or group) cannot be applied on this host: not a name or ID, or no such account. ``lookup``
    is pwd.getpwnam or grp.getgrnam; it raises KeyError for a name the host does not know."""
    if value is None:
        return None
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text is None:
        return "%s: %r is a %s, not a user or group name" % (option, value, type(value).__name__)
    if NUMERIC_ID_RE.fullmatch(text):
        return None if int(text) <= MAX_ID else "%s: %r is not a valid numeric ID (0 to %d)" % (option, text, MAX_ID)
    if not ACCOUNT_NAME_RE.fullmatch(text):
        return "%s: %r is not a user or group name (letters, digits, '_', '.', '-', starting with a letter or '_')" % (option, text)
    try:
        lookup(text)
    except KeyError:
        return "%s: %r does not exist on this host: create it first, or name an existing one" % (option, text)
    return None


def file_args_errors(params: t.Mapping[str, t.Any]) -> list[str]:
    """Every problem of a module's ``mode``, ``owner`` and ``group`` (its common file arguments), before it writes."""
    errors = [mode_error(params.get("mode")), account_error(params.get("owner"), "owner", pwd.getpwnam),
              account_error(params.get("group"), "group", grp.getgrnam)]
    return [error for error in errors if error]


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _os_problem(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a loop of symbolic links"
    if exc.errno == errno.ENAMETOOLONG:
        return "is too long for the file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read: permission denied"
    return "cannot be used: %s" % (exc.strerror or exc)


def _check_ancestors(path: str, what: str) -> None:
    """The nearest existing ancestor of ``path`` must be a directory (following symbolic links)."""
    current = os.path.dirname(path)
    while True:
        try:
            st = os.stat(current)
        except FileNotFoundError:
            if os.path.islink(current):
                raise FileError(what, path, "sits under %r, a symbolic link to %r, which does not exist"
                                % (current, os.readlink(current))) from None
            parent = os.path.dirname(current)
            if parent == current:  # pragma: no cover - "/" always exists
                return
            current = parent
            continue
        except NotADirectoryError:
            parent = os.path.dirname(current)
            if parent == current:  # pragma: no cover
                raise
            current = parent
            continue
        except OSError as exc:
            raise FileError(what, path, "sits under %r, which %s" % (current, _os_problem(exc))) from None
        if not stat.S_ISDIR(st.st_mode):
            raise FileError(what, path, "sits under %r, which is %s, not a directory" % (current, _kind(st.st_mode)))
        return


def _stat(path: str, what: str) -> os.stat_result | None:
    """The status of ``path`` (following links); None when it does not exist and could be created."""
    if "\x00" in path:
        raise FileError(what, path, "holds a NUL character")
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise FileError(what, path, "is a symbolic link to %r, which does not exist" % os.readlink(path)) from None
        _check_ancestors(path, what)
        return None
    except NotADirectoryError:
        _check_ancestors(path, what)
        raise FileError(what, path, "sits under something that is not a directory") from None  # pragma: no cover
    except OSError as exc:
        raise FileError(what, path, _os_problem(exc)) from None


def _check_kind(path: str, what: str, is_kind: t.Callable[[int], bool], kind: str) -> bool:
    st = _stat(path, what)
    if st is None:
        return False
    if not is_kind(st.st_mode):
        raise FileError(what, path, "is %s, not %s" % (_kind(st.st_mode), kind))
    return True


def check_file(path: str, what: str = "path") -> bool:
    """Whether the regular file ``path`` exists. Raises FileError for anything else there, or above it."""
    return _check_kind(path, what, stat.S_ISREG, "a regular file")


def check_directory(path: str, what: str = "path") -> bool:
    """Whether the directory ``path`` exists. Raises FileError when something else is there, or above it."""
    return _check_kind(path, what, stat.S_ISDIR, "a directory")


def read_bytes(path: str, what: str = "path", max_size: int = MAX_READ) -> bytes | None:
    """The file's bytes, or None when it does not exist. Raises FileError when ``path`` is not a regular file."""
    if not check_file(path, what):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FileError(what, path, _os_problem(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileError(what, path, "is %s, not a regular file" % _kind(st.st_mode))
        if st.st_size > max_size:
            raise FileError(what, path, "is larger than %d bytes; it is not a file this module reads" % max_size)
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(max_size + 1)
    except OSError as exc:
        raise FileError(what, path, _os_problem(exc)) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_size:
        raise FileError(what, path, "is larger than %d bytes; it is not a file this module reads" % max_size)
    return data


def read_json_object(path: str, what: str = "record") -> dict[str, t.Any] | None:
    """A JSON object kept in a file (a module's state record), or None when the file does not exist.

    Raises FileError, naming the file and the fix, when it is not valid UTF-8 JSON or not a JSON object.
    """
    data = read_bytes(path, what)
    if data is None:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and json.JSONDecodeError are both ValueErrors
        raise FileError(what, path, "is not valid JSON (%s): fix or remove it" % exc) from None
    if not isinstance(value, dict):
        raise FileError(what, path, "does not hold a JSON object: fix or remove it")
    return value


@dataclass
class JsonRecord:
    """A module's state record as :func:`read_json_record` found it.

    ``data`` is the record ({} when there is none). ``stale`` lists the old locations that still hold a copy: the
    record was read from the first of them when ``path`` did not exist, and :func:`write_json_record` removes them.
    """

    path: str
    data: dict[str, t.Any]
    stale: list[str] = field(default_factory=list)


def read_json_record(path: str, what: str = "record", old_paths: t.Sequence[str] = ()) -> JsonRecord:
    """A module's state record at ``path``, else at the first of ``old_paths`` (where an earlier release kept it).

    The one error policy of every state record (:func:`read_json_object`): a missing file is an empty record; a file
    that is not a JSON object, or a path that is not a regular file, raises FileError naming the file and the fix.
    Nothing is guessed, because a record holds what ``state: absent`` needs to give the user's files back.
    """
    path = os.path.abspath(path)
    data = read_json_object(path, what)
    stale = []
    for old in old_paths:
        old = os.path.abspath(old)
        if old == path:
            continue
        found = read_json_object(old, what)
        if found is None:
            continue
        stale.append(old)
        if data is None:
            data = found
    return JsonRecord(path=path, data=data or {}, stale=stale)


def record_bytes(data: t.Mapping[str, t.Any]) -> bytes:
    """A state record as it is written: indented JSON with sorted keys and a final newline."""
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def write_json_record(module: AnsibleModule, path: str, data: t.Mapping[str, t.Any], what: str = "record",
                      stale: t.Sequence[str] = ()) -> WriteResult:
    """Make the state record ``path`` hold ``data``, creating its parent directories; remove it when ``data`` is empty.

    The ``stale`` copies (``JsonRecord.stale``: the record at a location an earlier release used) are removed, and
    so is their directory once empty; that alone counts as a change. The write is atomic (:func:`write_file`). In
    check mode nothing is created, written or removed, and the result says what would change. The module's common
    file arguments (of a module that writes a user's file with ``mode``) are not applied to the record. Raises FileError.
    """
    path = os.path.abspath(path)
    before = read_bytes(path, what)
    if data:
        content = record_bytes(data)
        if before is None and not check_directory(os.path.dirname(path), what):
            if module.check_mode:
                result = WriteResult(changed=True, content_changed=True, existed=False, diff=make_diff(path, None, content))
            else:
                make_dirs(os.path.dirname(path), what)
                result = write_file(module, path, content, what=what, file_args=False)
        else:
            result = write_file(module, path, content, what=what, file_args=False)
    else:
        existed = before is not None
        result = WriteResult(changed=existed, content_changed=existed, existed=existed)
        if existed:
            result.diff = {"before": _text(before), "after": "", "before_header": path, "after_header": "%s (absent)" % path}
            if not module.check_mode:
                remove(path, what)
    for old in stale:
        if not check_file(old, what):
            continue
        result.changed = True
        if not module.check_mode:
            remove(old, what)
            try:
                os.rmdir(os.path.dirname(old))  # the old directory, once nothing else is in it
            except OSError:
                pass
    return result


# Per-file records: what a module did to each file it manages, keyed by the file's path, so that state=absent undoes
# exactly that. The originals record (compose, the runtime merge) holds the text a file had before the module's first
# change; vfio_kernel_args holds the arguments it added. One reader and one writer for all of them.
SKIP = object()


def read_file_record(path: str, entry: t.Callable[[t.Any], t.Any], what: str = "record") -> dict[str, t.Any]:
    """A record keyed by file path (:func:`read_json_record`'s error policy); each value passes through ``entry``,
    which returns the value to keep or :data:`SKIP` for one of another shape. Raises FileError."""
    kept = {}
    for key, value in read_json_record(path, what).data.items():
        value = entry(value)
        if value is not SKIP:
            kept[str(key)] = value
    return kept


def write_file_record(module: AnsibleModule, path: str, before: t.Mapping[str, t.Any], after: t.Mapping[str, t.Any],
                      encode: t.Callable[[t.Any], t.Any] = lambda value: value, what: str = "record") -> bool:
    """Write (or remove, once empty) the record when ``after`` differs from ``before``, each value through ``encode``;
    nothing in check mode. Returns whether it differed. Raises FileError."""
    if dict(after) == dict(before):
        return False
    write_json_record(module, path, {key: encode(value) for key, value in after.items()}, what)
    return True


def _original(value: t.Any) -> t.Any:
    if isinstance(value, dict) and isinstance(value.get("original"), (str, type(None))):
        return value.get("original")
    return SKIP


def read_originals(path: str, what: str = "record") -> dict[str, str | None]:
    """The originals record: per file, the text it held before the module's first change (None: it did not exist).
    Stored as ``{file: {"original": text}}``. Raises FileError."""
    return read_file_record(path, _original, what)


def write_originals(module: AnsibleModule, path: str, before: t.Mapping[str, str | None],
                    after: t.Mapping[str, str | None], what: str = "record") -> bool:
    """:func:`write_file_record` for the originals record. Raises FileError."""
    return write_file_record(module, path, before, after, lambda original: {"original": original}, what)


def note_originals(record: t.Mapping[str, str | None], planned: t.Iterable[tuple[str, str | None, str | None]],
                   state: str) -> dict[str, str | None]:
    """The originals record after a run: ``planned`` is (file, text now, text it will hold; None: removed). With
    state=present a file's first change records its text now; with state=absent its entry goes."""
    after = dict(record)
    for file, before, content in planned:
        if state == "absent":
            after.pop(file, None)
        elif content != before and file not in after:
            after[file] = before
    return after


def read_text(path: str, what: str = "path") -> str | None:
    """The file as UTF-8 text, or None when it does not exist. Raises FileError when it is not a regular file or not
    UTF-8 (it is then left as it is)."""
    data = read_bytes(path, what)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileError(what, path, "is not UTF-8 text (%s); it was not changed" % exc) from None


def make_dirs(directory: str, what: str = "path", mode: int = 0o755) -> bool:
    """Create ``directory`` and its missing parents; whether it had to be created. Raises FileError."""
    if check_directory(directory, what):
        return False
    try:
        os.makedirs(directory, mode=mode, exist_ok=True)
    except OSError as exc:
        raise FileError(what, directory, "cannot be created: %s" % (exc.strerror or exc)) from None
    return True


def remove(path: str, what: str = "path") -> bool:
    """Remove the regular file ``path`` (or a link to one); whether it existed. Raises FileError."""
    if not check_file(path, what):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise FileError(what, path, "cannot be removed: %s" % (exc.strerror or exc)) from None
    return True


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
    fd, tmp = tempfile.mkstemp(prefix=".%s." % name[:100], suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def _temp_or_fail(module: AnsibleModule, directory: str, path: str, content: bytes, what: str) -> str:
    try:
        return _temp_copy(directory, os.path.basename(path), content)
    except OSError as exc:
        module.fail_json(msg="%s %r: cannot write a temporary file in %r: %s" % (what, path, directory, exc.strerror or exc), path=path)
    raise AssertionError("fail_json returned")  # pragma: no cover


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
    what: str = "path",
    file_args: bool = True,
) -> WriteResult:
    """Make ``path`` hold ``content``. See the module docstring.

    ``validate(tmp_path)`` is called before anything is replaced; it reports a problem by calling
    ``module.fail_json`` (or raising), and the destination is then left untouched. It runs only when the content
    changes, unless ``validate_unchanged`` is set. A path that cannot be written (see :func:`check_file`) fails the
    module, naming ``what`` and the path, before anything is written. ``file_args=False`` leaves the module's
    common file arguments (mode, owner, group) to the file they are for, not this one.
    """
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    try:
        before = read_bytes(path, what)
        if before is None and not check_directory(directory, what):
            module.fail_json(msg="%s %r: its directory %r does not exist" % (what, path, directory), path=path)
    except FileError as exc:
        module.fail_json(msg=str(exc), path=path)

    content_changed = before != content
    result = WriteResult(changed=content_changed, content_changed=content_changed, existed=before is not None)
    result.diff = make_diff(path, before, content)

    if validate is not None and (content_changed or validate_unchanged):
        # The copy goes next to the destination only when it is about to replace it; otherwise (check mode, or
        # unchanged content) it goes to the module's temporary directory.
        will_move = content_changed and not module.check_mode
        tmp = _temp_or_fail(module, directory if will_move else module.tmpdir, path, content, what)
        try:
            validate(tmp)
        except BaseException:
            _remove(tmp)
            raise
        if not will_move:
            _remove(tmp)
            tmp = None
    elif content_changed and not module.check_mode:
        tmp = _temp_or_fail(module, directory, path, content, what)
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

    if file_args and "mode" in module.params and (before is not None or not module.check_mode):
        common = module.load_file_common_arguments(module.params, path=path)
        result.changed = module.set_fs_attributes_if_different(common, result.changed, diff=None)
    return result

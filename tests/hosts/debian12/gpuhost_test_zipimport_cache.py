"""gpuhost.nvidia TEST HOSTS ONLY: a bytecode cache for Python modules imported from zip archives.

Every Ansible task runs its module as an AnsiballZ payload: a zip of the module and its module_utils that Python
imports with zipimport, which never caches bytecode, so each task compiles ansible.module_utils.basic and the rest
again (about a third of a task's CPU on the 2-core test machine, tests/hosts/README.md). The test images load this
file at every Python start (gpuhost-test-zipimport-cache.pth) and keep what zipimport compiles in CACHE_DIR, keyed by
the SHA-256 of the interpreter's cache tag and the exact source bytes: the same source always gives the same code,
so a module that changed is compiled afresh, never served stale. The code objects take the file name of the current
archive, so tracebacks name the right file. Managed hosts have nothing like this; it only saves test time.
"""

import hashlib
import marshal
import os
import sys
import types
import zipimport

CACHE_DIR = "/var/cache/gpuhost-test-zipimport"
_TAG = (sys.implementation.cache_tag or "").encode()
_compile_source = getattr(zipimport, "_compile_source", None)


def _renamed(code, filename):
    consts = tuple(_renamed(const, filename) if isinstance(const, types.CodeType) else const for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _cached_compile_source(pathname, source):
    path = os.path.join(CACHE_DIR, hashlib.sha256(_TAG + b"\0" + source).hexdigest())
    try:
        with open(path, "rb") as cached:
            return _renamed(marshal.load(cached), pathname)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile_source(pathname, source)
    try:
        os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
        partial = f"{path}.{os.getpid()}"
        with open(partial, "wb") as new:
            marshal.dump(code, new)
        os.replace(partial, path)  # whole files only: concurrent tasks never read a partial one
    except OSError:
        pass
    return code


if _compile_source is not None and _TAG:
    zipimport._compile_source = _cached_compile_source

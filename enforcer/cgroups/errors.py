"""Errors of the cgroup edge: every foreign ``OSError`` becomes one of these, naming the file.

The drivers translate at the boundary (the httpx ``map_exceptions`` habit), so
callers never see a bare ``OSError`` and an operator reading a log line knows
which cgroupfs file refused which value and why (errno name included).
"""

from __future__ import annotations

import errno as errno_names
import os

from enforcer.errors import EnforcerError


class CgroupError(EnforcerError):
    """Base class of every cgroup-edge error."""

    reason = "CgroupError"


class InvalidCgroupValue(CgroupError, ValueError):
    """A value can never be written to a cgroup (period out of range, empty quota, ...)."""

    reason = "InvalidCgroupValue"


class CgroupNameError(CgroupError, ValueError):
    """A pod uid, container id or cgroup path cannot name a cgroup (``/``, ``..``, systemd-unsafe ``_``)."""

    reason = "InvalidCgroupName"

    def __init__(self, value: str, detail: str) -> None:
        super().__init__(f"invalid cgroup name component {value!r}: {detail}")
        self.value = value


def _describe(error: OSError) -> str:
    code = error.errno
    name = errno_names.errorcode.get(code, "") if code is not None else ""
    text = error.strerror or (os.strerror(code) if code is not None else str(error))
    return f"{name}: {text}" if name else text


class CgroupReadError(CgroupError):
    """A cgroup file could not be read, or its content is not what the kernel writes."""

    reason = "CgroupReadError"

    def __init__(self, file: str, detail: str, *, errno: int | None = None) -> None:
        super().__init__(f"cannot read cgroup file {file}: {detail}")
        self.file = file
        self.detail = detail
        self.errno = errno

    @classmethod
    def from_os_error(cls, file: str, error: OSError) -> CgroupReadError:
        return cls(file, _describe(error), errno=error.errno)


class CgroupWriteError(CgroupError):
    """The kernel (or the filesystem) refused a value for a cgroup file."""

    reason = "CgroupWriteError"

    def __init__(self, file: str, value: str, detail: str, *, errno: int | None = None) -> None:
        super().__init__(f"cannot write {value!r} to cgroup file {file}: {detail}")
        self.file = file
        self.value = value
        self.detail = detail
        self.errno = errno

    @classmethod
    def from_os_error(cls, file: str, value: str, error: OSError) -> CgroupWriteError:
        return cls(file, value, _describe(error), errno=error.errno)


class CgroupMissingError(CgroupWriteError):
    """The cgroup directory itself is gone (container not started yet, or already removed).

    Reconcile treats this as *pending*, not as a failure: the runtime creates
    container cgroups after the enforcer has decided their cpusets.
    """

    reason = "CgroupMissing"

    def __init__(self, file: str, value: str, cgroup: str) -> None:
        super().__init__(file, value, f"cgroup {cgroup} does not exist", errno=errno_names.ENOENT)
        self.cgroup = cgroup

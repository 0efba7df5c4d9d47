"""The cgroup v2 driver, and the only code that touches cgroupfs files.

v2 files under one unified root (``/sys/fs/cgroup``):

=================  ===========================================  =====================
field              file                                         unlimited
=================  ===========================================  =====================
cpus               ``cpuset.cpus`` (Linux list syntax)          --
mems               ``cpuset.mems``                              --
cpu quota          ``cpu.max`` = ``"<quota> <period>"``          ``"max <period>"``
memory limit       ``memory.max`` (bytes)                       ``"max"``
memory usage       ``memory.current`` (read only)               --
=================  ===========================================  =====================

The file primitives :func:`read_file` and :func:`write_file` are shared with
:mod:`enforcer.cgroups.v1`, so exactly one place issues ``write(2)`` on
cgroupfs.  Each value goes out in a single ``write`` call (cgroupfs parses one
write as one value) to a file that must already exist: the driver never creates
files or directories, so a fixture tree with a missing file fails the same way
a kernel without that controller would.

Must not: decide *what* to write (reconcile and the resize plan do), or guess
around kernel refusals (they surface as ``CgroupWriteError`` with the errno).
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from enforcer.cgroups import driver, errors
from shared.cpuset import CPUSet
from shared.errors import CPUSetParseError

log = logging.getLogger(__name__)

_UNLIMITED = "max"


def cgroup_dir(root: Path, path: str) -> Path:
    """``root/path`` for a relative cgroup path; refuses anything that could leave ``root``."""
    parts = [p for p in path.split("/") if p]
    for part in parts:
        if part in (".", "..") or "\x00" in part:
            raise errors.CgroupNameError(path, "cgroup paths may not contain '.', '..' or NUL components")
    return root.joinpath(*parts)


def read_file(file: Path) -> str:
    """The stripped content of a cgroup file, errors translated."""
    try:
        with open(file, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError as error:
        raise errors.CgroupReadError.from_os_error(str(file), error) from error
    except UnicodeDecodeError as error:
        raise errors.CgroupReadError(str(file), f"not ASCII text: {error}") from error


def read_int(file: Path) -> int:
    text = read_file(file)
    try:
        return int(text)
    except ValueError:
        raise errors.CgroupReadError(str(file), f"expected an integer, found {text!r}") from None


def read_list(file: Path) -> CPUSet:
    text = read_file(file)
    try:
        return CPUSet.parse(text)
    except CPUSetParseError as error:
        raise errors.CgroupReadError(str(file), error.message) from None


def write_file(file: Path, value: str) -> None:
    """Write ``value`` in one ``write(2)``; the file must exist (never created)."""
    data = value.encode("ascii")
    try:
        fd = os.open(file, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    except FileNotFoundError as error:
        if not file.parent.is_dir():
            raise errors.CgroupMissingError(str(file), value, str(file.parent)) from error
        raise errors.CgroupWriteError.from_os_error(str(file), value, error) from error
    except OSError as error:
        raise errors.CgroupWriteError.from_os_error(str(file), value, error) from error
    try:
        written = os.write(fd, data)
    except OSError as error:
        raise errors.CgroupWriteError.from_os_error(str(file), value, error) from error
    finally:
        os.close(fd)
    if written != len(data):
        # cgroupfs accepts a value in one write or not at all; a short write means a
        # regular file on a full disk, never a kernel file, but it is still a failure.
        detail = f"short write ({written} of {len(data)} bytes)"
        raise errors.CgroupWriteError(str(file), value, detail, errno=errno.EIO)
    log.debug("cgroup file written", extra={"file": str(file), "value": value})


def child_paths(root: Path, path: str) -> list[str]:
    """The child cgroup directories of ``root/path`` as paths relative to ``root`` (``[]`` when gone)."""
    directory = cgroup_dir(root, path)
    base = "/".join(p for p in path.split("/") if p)
    try:
        names = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []
    except OSError as error:
        raise errors.CgroupReadError.from_os_error(str(directory), error) from error
    return [f"{base}/{name}" if base else name for name in names]


def default_page_size() -> int:
    return os.sysconf("SC_PAGE_SIZE")


class V2CgroupDriver:
    """Programs cgroup v2 files under ``root`` (normally ``/sys/fs/cgroup``)."""

    name = "v2"

    def __init__(self, root: Path | str, *, page_size: int | None = None) -> None:
        self.root = Path(root)
        self.page_size = page_size if page_size is not None else default_page_size()

    def _file(self, path: str, name: str) -> Path:
        return cgroup_dir(self.root, path) / name

    def exists(self, path: str) -> bool:
        return cgroup_dir(self.root, path).is_dir()

    # -- cpuset -------------------------------------------------------------------
    def read_cpus(self, path: str) -> CPUSet:
        return read_list(self._file(path, "cpuset.cpus"))

    def write_cpus(self, path: str, cpus: CPUSet) -> None:
        write_file(self._file(path, "cpuset.cpus"), str(cpus))

    def read_mems(self, path: str) -> tuple[int, ...]:
        return tuple(read_list(self._file(path, "cpuset.mems")))

    def write_mems(self, path: str, mems: tuple[int, ...]) -> None:
        write_file(self._file(path, "cpuset.mems"), driver.format_mems(driver.normalize_mems(mems)))

    # -- cpu ----------------------------------------------------------------------
    def read_cpu_quota(self, path: str) -> driver.CPUQuota:
        file = self._file(path, "cpu.max")
        text = read_file(file)
        fields = text.split()
        try:
            if len(fields) != 2:
                raise ValueError(text)
            quota = None if fields[0] == _UNLIMITED else int(fields[0])
            return driver.CPUQuota(quota, int(fields[1]))
        except (ValueError, errors.InvalidCgroupValue):
            raise errors.CgroupReadError(str(file), f"expected '<quota|max> <period>', found {text!r}") from None

    def write_cpu_quota(self, path: str, quota: driver.CPUQuota) -> None:
        write_file(self._file(path, "cpu.max"), str(quota))

    # -- memory -------------------------------------------------------------------
    def read_memory_limit(self, path: str) -> int | None:
        file = self._file(path, "memory.max")
        if read_file(file) == _UNLIMITED:
            return None
        return read_int(file)

    def write_memory_limit(self, path: str, limit: int | None) -> None:
        driver.validate_memory_limit(limit)
        write_file(self._file(path, "memory.max"), _UNLIMITED if limit is None else str(limit))

    def read_memory_usage(self, path: str) -> int:
        return read_int(self._file(path, "memory.current"))

    # -- hierarchy ----------------------------------------------------------------------
    def children(self, path: str) -> list[str]:
        return child_paths(self.root, path)

    @property
    def nested_cpusets(self) -> bool:
        return False  # v2 intersects a child's cpuset with its parent's (cpuset.cpus.effective)


_check: type[driver.CgroupDriver] = V2CgroupDriver

"""The enforcer's durable state file: versioned, checksummed, written atomically.  The only writer of ``state_dir``.

Format (our own; never the kubelet's ``cpu_manager_state``)::

    {
      "format": "numaguard-state",
      "version": 1,
      "checksum": "sha256:<hex>",
      "data": {...}
    }

``data`` is written as one compact line (any JSON layout reads back the same;
files written indented by earlier builds load unchanged).

The checksum is SHA-256 over the canonical JSON (sorted keys, no spaces,
ASCII) of ``{"data", "format", "version"}``: the data *and* the fields that
say how to read it.  Covering the version means a damaged version number can
never route intact data through the wrong migration; it is reported as
corruption instead.

Guarantees:

* ``save`` is atomic and durable: temp file in the same directory, write,
  ``fsync``, rename over the target, ``fsync`` the directory.  A crash at any
  point leaves either the old or the new file, both valid.  Leftover temp files
  (``.<name>.tmp-*``) are never read and are removed by the next ``save``.
* ``load`` returns ``None`` only when no state was ever saved.  Anything else
  that is not a valid file raises: :class:`CheckpointCorruptError` (empty,
  truncated, not JSON, damaged envelope, checksum mismatch, or the file is gone
  while its backup remains) or :class:`CheckpointVersionError` (a foreign
  format, or a version this build cannot read).  It never returns empty state
  for a damaged file: that would hand pinned CPUs out twice.
* Versions: ``CURRENT_VERSION`` is written; older versions are read through
  ``MIGRATIONS`` (version N -> a function returning version N+1 data), applied
  in sequence after the file's own checksum verified.  Newer versions are
  refused (a downgrade needs a drain, as with the kubelet's checkpoints).

Backup decision: each ``save`` first keeps the file it replaces as
``<name>.bak``, but only if that file verifies, so a damaged file never
overwrites a good backup.  A file byte for byte equal to what the store last
wrote or loaded is known to verify; any other content is decoded first.  The
backup is one save behind; it is used only by an operator (``numaguard
recover-state --mode from-backup``), never automatically, because silently
going one admission back in time could also hand out CPUs twice.

Recovery (:func:`recover`, the ``recover-state`` command; stop the enforcer
first): ``quarantine`` moves the state file (and its backup) aside as
``<name>.corrupt-<UTC time>`` so the enforcer starts from an empty state, which
it rebuilds as pods are admitted.  As with the kubelet's deleted
``cpu_manager_state``, drain the node first: running pods keep their cgroups,
but the enforcer no longer knows which CPUs and memory they hold.
``from-backup`` restores ``<name>.bak``; the last change before the damage is
lost, so drain the node as well unless you know nothing changed.

The enforcer writes this file through :mod:`enforcer.state.journal`: it is the
*base* a journal of changes continues, so a save here is a compaction, and "one
save behind" means the base of the previous start or compaction.

Must not: interpret ``data`` (the engine's ``to_dict``/``from_dict`` do).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from enforcer.state import errors

log = logging.getLogger(__name__)

FORMAT: Final = "numaguard-state"
CURRENT_VERSION: Final = 1
DEFAULT_STATE_DIR: Final = "/var/lib/numaguard"
DEFAULT_STATE_FILE: Final = "numaguard_state.json"

Migration = Callable[[dict[str, Any]], dict[str, Any]]
MIGRATIONS: Final[Mapping[int, Migration]] = {}
"""Upgrades by source version: ``MIGRATIONS[n](data_of_version_n) -> data_of_version_n_plus_1``.

Empty while version 1 is the only version.  When version 2 arrives, add
``1: _v1_to_v2`` here and keep the function forever, so old files still load.
"""

_ENVELOPE_KEYS: Final = frozenset({"format", "version", "checksum", "data"})
_CHECKSUM_PREFIX: Final = "sha256:"
_HEX_DIGITS: Final = frozenset("0123456789abcdef")
_FORMAT_JSON: Final = json.dumps(FORMAT).encode("ascii")

FileStatus = Literal["missing", "valid", "corrupt", "unsupported"]
RecoveryMode = Literal["quarantine", "from-backup", "check"]


# -- encoding -------------------------------------------------------------------------


def canonical_json(value: object) -> bytes:
    """The byte string the checksum covers: sorted keys, no whitespace, ASCII, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def checksum_of(data: Mapping[str, Any], version: int) -> str:
    return _checksum_over(canonical_json(data), version)


def _checksum_over(canonical_data: bytes, version: int) -> str:
    """``checksum_of`` from the data's canonical bytes, so a save serialises the data for the checksum only once.

    The canonical JSON of ``{"data", "format", "version"}`` is the data's own
    canonical JSON between the envelope's sorted keys: no second encoding needed.
    """
    sha = hashlib.sha256(b'{"data":')
    sha.update(canonical_data)
    sha.update(b',"format":%s,"version":%s}' % (_FORMAT_JSON, json.dumps(version).encode("ascii")))
    return _CHECKSUM_PREFIX + sha.hexdigest()


def encode(data: dict[str, Any], *, path: str, version: int = CURRENT_VERSION) -> bytes:
    """The file content for ``data``; refuses data that would not load back equal (tuples, non-str keys, NaN).

    The envelope's fields get a line each, so an operator can read them, while
    ``data`` is one compact line in the engine's own key order: the standard
    library's indenting encoder is pure Python and cost most of a save.
    """
    try:
        canonical = canonical_json(data)
    except (TypeError, ValueError) as error:
        detail = f"data is not plain JSON: {error}"
        raise errors.CheckpointWriteError(path, f"cannot save state to {path}: {detail}") from None
    if json.loads(canonical) != data:
        raise errors.CheckpointWriteError(
            path, f"cannot save state to {path}: data would not load back equal (tuples or non-string keys?)"
        )
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")
    head = b'{\n  "format": %s,\n  "version": %s,\n  "checksum": "%s",\n  "data": ' % (
        _FORMAT_JSON,
        json.dumps(version).encode("ascii"),
        _checksum_over(canonical, version).encode("ascii"),
    )
    return head + body + b"\n}\n"


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def finite_float(text: str) -> float:
    """``parse_float`` for state files: a number too large for a double (``1.5e+309``) is damage, not infinity.

    The standard reader turns such a literal into ``inf``, which the checksum's
    canonical encoder (``allow_nan=False``) then refuses with a bare ValueError;
    a bit flip in an exponent must be reported as corruption instead.
    """
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range for a double")
    return value


def parse_json(text: str) -> Any:
    """The strict JSON reader every state file uses: unique keys, no NaN/Infinity, finite numbers only."""
    return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant, parse_float=finite_float)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def decode(
    raw: bytes,
    *,
    path: str,
    version: int = CURRENT_VERSION,
    migrations: Mapping[int, Migration] = MIGRATIONS,
) -> dict[str, Any]:
    """Verify a file's bytes and return its data at ``version``; every failure is a typed error."""
    if not raw.strip():
        raise errors.CheckpointCorruptError(path, "the file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise errors.CheckpointCorruptError(path, f"not UTF-8 text (byte {error.start})") from None
    try:
        envelope = parse_json(text)
    except json.JSONDecodeError as error:
        if error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string"):
            raise errors.CheckpointCorruptError(path, f"truncated: the JSON ends early ({error.msg})") from None
        raise errors.CheckpointCorruptError(path, f"not JSON: {error}") from None
    except (ValueError, RecursionError) as error:
        raise errors.CheckpointCorruptError(path, f"rejected JSON: {error}") from None
    if not isinstance(envelope, dict):
        raise errors.CheckpointCorruptError(path, f"not a {FORMAT} envelope (top level is {type(envelope).__name__})")

    # A foreign file is refused as such; a file that is almost our envelope is a damaged one.
    found_format = envelope.get("format")
    if found_format != FORMAT:
        if "format" in envelope and not _near(found_format, FORMAT):
            raise errors.CheckpointVersionError(
                path, f"foreign format {found_format!r}, expected {FORMAT!r}", found_format=found_format
            )
        if "format" not in envelope and len(_ENVELOPE_KEYS & envelope.keys()) < 3:
            keys = ", ".join(sorted(envelope)) or "none"
            raise errors.CheckpointVersionError(path, f"not a {FORMAT} file (no 'format' field; keys: {keys})")
        if "format" in envelope:
            raise errors.CheckpointCorruptError(path, f"damaged envelope: format {found_format!r}")
    if envelope.keys() != _ENVELOPE_KEYS:
        found = ", ".join(sorted(envelope))
        raise errors.CheckpointCorruptError(path, f"damaged envelope: keys are {found}")

    found_version = envelope["version"]
    if not isinstance(found_version, int) or isinstance(found_version, bool):
        raise errors.CheckpointCorruptError(path, f"damaged envelope: version {found_version!r} is not an integer")
    if found_version > version:
        raise errors.CheckpointVersionError(
            path,
            f"version {found_version} was written by a newer numaguard; this one reads versions up to {version} "
            "(a downgrade needs a drain and recover-state --mode quarantine)",
            found_format=FORMAT,
            found_version=found_version,
        )
    if found_version < 1:
        raise errors.CheckpointVersionError(path, f"unknown version {found_version}", found_version=found_version)

    recorded = envelope["checksum"]
    raw_data = envelope["data"]
    if not _is_checksum(recorded):
        raise errors.CheckpointCorruptError(path, f"damaged envelope: malformed checksum {recorded!r}")
    if not isinstance(raw_data, dict):
        raise errors.CheckpointCorruptError(path, "damaged envelope: data is not an object")
    data: dict[str, Any] = raw_data
    try:
        actual = checksum_of(data, found_version)
    except (TypeError, ValueError, RecursionError) as error:  # parse_json's checks make this rare: never a bare error
        raise errors.CheckpointCorruptError(path, f"data is not plain JSON: {error}") from None
    if actual != recorded:
        raise errors.CheckpointCorruptError.checksum_mismatch(path, expected=recorded, actual=actual)

    for source in range(found_version, version):
        upgrade = migrations.get(source)
        if upgrade is None:
            raise errors.CheckpointVersionError(
                path, f"no upgrade path from version {source} to {source + 1}", found_version=found_version
            )
        data = upgrade(data)
    return data


def _near(found: object, expected: str) -> bool:
    """Same length and at most two characters apart: what a few flipped bits do to a string."""
    if not isinstance(found, str) or len(found) != len(expected):
        return False
    return sum(a != b for a, b in zip(found, expected, strict=True)) <= 2


def _is_checksum(value: object) -> bool:
    if not isinstance(value, str) or not value.startswith(_CHECKSUM_PREFIX):
        return False
    digest = value[len(_CHECKSUM_PREFIX) :]
    return len(digest) == 64 and set(digest) <= _HEX_DIGITS


# -- the store --------------------------------------------------------------------------


class CheckpointStore:
    """One state file (``path``) with its backup (``<path>.bak``), lock and temp files beside it.

    Saves from this and other processes are serialised by an ``flock`` on
    ``.<name>.lock``.  One enforcer owns the file; :meth:`claim` lets it say so,
    and ``recover-state`` refuses to run while the claim is held.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        version: int = CURRENT_VERSION,
        migrations: Mapping[int, Migration] = MIGRATIONS,
        keep_backup: bool = True,
    ) -> None:
        self.path = Path(path)
        self.version = version
        self.migrations = migrations
        self.keep_backup = keep_backup
        # The bytes this store last read as valid or wrote at ``path``: a file still equal to them needs no
        # second verification before it becomes the backup (the verification was most of a save's cost).
        self._known_good: bytes | None = None

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def backup_path(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def _hidden(self, suffix: str) -> Path:
        return self.directory / f".{self.path.name}.{suffix}"

    # -- reading ----------------------------------------------------------------------
    def load(self) -> dict[str, Any] | None:
        """The saved data, or ``None`` when nothing was ever saved; raises on anything damaged."""
        raw = self._read(self.path)
        if raw is None:
            if self.backup_path.exists():
                raise errors.CheckpointCorruptError(
                    str(self.path),
                    f"the state file is missing but its backup {self.backup_path.name} exists; "
                    "run numaguard recover-state (--mode from-backup or --mode quarantine)",
                )
            return None
        data = decode(raw, path=str(self.path), version=self.version, migrations=self.migrations)
        self._known_good = raw
        return data

    def status(self, path: Path | None = None) -> tuple[FileStatus, str]:
        """Classify the state file (or ``path``, e.g. the backup) without raising: for ``recover-state``."""
        target = self.path if path is None else path
        try:
            raw = self._read(target)
        except errors.CheckpointError as error:
            return "corrupt", error.message
        if raw is None:
            return "missing", f"{target} does not exist"
        return self._classify(raw, target)

    def _classify(self, raw: bytes, target: Path) -> tuple[FileStatus, str]:
        try:
            decode(raw, path=str(target), version=self.version, migrations=self.migrations)
        except errors.CheckpointVersionError as error:
            return "unsupported", error.message
        except errors.CheckpointError as error:
            return "corrupt", error.message
        return "valid", f"{target} is a valid {FORMAT} file"

    def _read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise errors.CheckpointError(str(path), f"cannot read state file {path}: {error}") from None

    # -- writing ----------------------------------------------------------------------
    def save(self, data: dict[str, Any]) -> None:
        """Replace the state with ``data``, atomically and durably (see the module docstring)."""
        content = encode(data, path=str(self.path), version=self.version)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self._locked():
                self.remove_temp_files()
                temp = self._write_temp(content)
                try:
                    if self.keep_backup:
                        self._keep_backup()
                    os.replace(temp, self.path)
                    self._known_good = content
                except OSError:
                    with contextlib.suppress(OSError):
                        temp.unlink()
                    raise
                fsync_directory(self.directory)
        except OSError as error:
            raise errors.CheckpointWriteError(str(self.path), f"cannot save state to {self.path}: {error}") from None
        log.debug("state saved", extra={"path": str(self.path), "bytes": len(content)})

    def remove_temp_files(self) -> list[Path]:
        """Delete temp files a crashed save left behind; returns what was removed."""
        removed = []
        prefix = f".{self.path.name}.tmp-"
        with os.scandir(self.directory) as entries:
            leftovers = [self.directory / entry.name for entry in entries if entry.name.startswith(prefix)]
        for leftover in leftovers:
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
                removed.append(leftover)
        if removed:
            log.warning("leftover state temp files removed", extra={"files": [str(p) for p in removed]})
        return removed

    def _write_temp(self, content: bytes) -> Path:
        temp = self._hidden(f"tmp-{os.getpid()}-{secrets.token_hex(4)}")
        write_durably(temp, content)
        return temp

    def _keep_backup(self) -> None:
        try:
            current = self._read(self.path)
        except errors.CheckpointError as error:
            status, detail = "corrupt", error.message
        else:
            if current is None:
                return
            # bytes this store wrote or loaded are known to verify; anything else is decoded first
            status, detail = ("valid", "") if current == self._known_good else self._classify(current, self.path)
        if status != "valid":
            log.warning("state file not backed up: it does not verify", extra={"path": str(self.path), "why": detail})
            return
        staging = self._hidden(f"tmp-{os.getpid()}-{secrets.token_hex(4)}-bak")
        try:
            os.link(self.path, staging)
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            write_durably(staging, self.path.read_bytes())  # filesystems without hard links
        os.replace(staging, self.backup_path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._hidden("lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def claim(self) -> StateClaim:
        """Mark this process as the file's owner until the claim is released (``recover-state`` checks it).

        Raises :class:`CheckpointError` when another process holds the claim.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._hidden("owner"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise errors.CheckpointError(
                str(self.path), f"state file {self.path} is in use by another process (an enforcer is running)"
            ) from None
        return StateClaim(fd)

    def is_claimed(self) -> bool:
        try:
            claim = self.claim()
        except errors.CheckpointError:
            return True
        claim.release()
        return False


class StateClaim:
    """An exclusive, process-lifetime lock on a state file; released on :meth:`release` or exit."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StateClaim:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def write_durably(path: Path, content: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(content)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (the rename itself lives in the directory's data)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- recovery ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What ``recover`` found and did, as lines for the operator."""

    mode: RecoveryMode
    status: FileStatus
    actions: tuple[str, ...]
    moved: tuple[tuple[Path, Path], ...] = ()
    restored_from: Path | None = None

    @property
    def changed_anything(self) -> bool:
        return bool(self.moved) or self.restored_from is not None


DRAIN_ADVICE: Final = (
    "Drain the node before starting the enforcer: running pods keep their cgroups, but the enforcer "
    "no longer knows which CPUs and memory they hold (the kubelet's rule for a deleted cpu_manager_state)."
)

FROM_BACKUP_NOTE: Final = (
    "the backup is one save older than the lost file: the last admission or removal before the damage is "
    "missing. " + DRAIN_ADVICE
)


def recover(
    path: Path | str,
    *,
    mode: RecoveryMode,
    force: bool = False,
    now: datetime | None = None,
    store: CheckpointStore | None = None,
    restored_note: str | None = FROM_BACKUP_NOTE,
) -> RecoveryResult:
    """The ``recover-state`` operations; see the module docstring.  Stop the enforcer first."""
    store = store if store is not None else CheckpointStore(path)
    status, detail = store.status()
    actions = [f"state file: {status}: {detail}"]
    if store.keep_backup:
        backup_status, backup_detail = store.status(store.backup_path)
        actions.append(f"backup: {backup_status}: {backup_detail}")
    else:
        backup_status = "missing"
    if mode == "check":
        return RecoveryResult(mode, status, tuple(actions))
    if not store.directory.is_dir():
        return RecoveryResult(mode, status, (*actions, f"nothing to do: {store.directory} does not exist"))
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        return _repair(
            store, mode, status, backup_status, actions, force=force, stamp=stamp, restored_note=restored_note
        )
    except OSError as error:
        raise errors.RecoveryError(str(store.path), f"recover-state {mode} failed: {error}") from None


def _repair(
    store: CheckpointStore,
    mode: Literal["quarantine", "from-backup"],
    status: FileStatus,
    backup_status: FileStatus,
    actions: list[str],
    *,
    force: bool,
    stamp: str,
    restored_note: str | None,
) -> RecoveryResult:
    if store.is_claimed():
        raise errors.RecoveryError(str(store.path), f"{store.path} is in use by a running enforcer; stop it first")
    with store._locked():
        store.remove_temp_files()
        if mode == "quarantine":
            if status == "valid" and not force:
                raise errors.RecoveryError(
                    str(store.path), f"{store.path} is valid; refusing to quarantine it without --force"
                )
            moved = []
            for source, target_name in (
                (store.path, f"{store.path.name}.corrupt-{stamp}"),
                (store.backup_path, f"{store.backup_path.name}.corrupt-{stamp}"),
            ):
                if source.exists():
                    target = free_name(store.directory / target_name)
                    os.replace(source, target)
                    moved.append((source, target))
                    actions.append(f"moved {source} to {target}")
            fsync_directory(store.directory)
            if not moved:
                actions.append("nothing to quarantine; the enforcer will start from an empty state")
            else:
                actions.append("the enforcer will start from an empty state and rebuild it as pods are admitted")
                actions.append(DRAIN_ADVICE)
            return RecoveryResult(mode, status, tuple(actions), moved=tuple(moved))

        # from-backup
        if backup_status != "valid":
            raise errors.RecoveryError(
                str(store.path), f"no valid backup to restore from ({store.backup_path}: {backup_status})"
            )
        if status == "valid" and not force:
            raise errors.RecoveryError(
                str(store.path), f"{store.path} is valid; refusing to replace it with the older backup without --force"
            )
        moved = []
        if store.path.exists():
            target = free_name(store.directory / f"{store.path.name}.corrupt-{stamp}")
            os.replace(store.path, target)
            moved.append((store.path, target))
            actions.append(f"moved {store.path} to {target}")
        temp = store._write_temp(store.backup_path.read_bytes())
        os.replace(temp, store.path)
        fsync_directory(store.directory)
        actions.append(f"restored {store.path} from {store.backup_path}")
        if restored_note:
            actions.append(restored_note)
        return RecoveryResult(mode, status, tuple(actions), moved=tuple(moved), restored_from=store.backup_path)


def free_name(candidate: Path) -> Path:
    if not candidate.exists():
        return candidate
    for index in range(1, 1000):
        numbered = candidate.with_name(f"{candidate.name}-{index}")
        if not numbered.exists():
            return numbered
    raise errors.RecoveryError(str(candidate), f"too many quarantined files named {candidate.name}-*")

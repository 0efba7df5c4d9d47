"""The enforcer's durable state as a base snapshot plus an append-only, checksummed journal of patches.

Why a journal (and not one file per pod): a change touches more than one pod's
data.  An admission changes the pod's record *and* the node's default CPU set
and the NUMA memory tables; a release can apply other pods' Deferred resizes.
A change must become durable all at once, so with per-pod files every change
would need a commit protocol over several files (or a rename of a directory).
One append of one checksummed line is atomic by construction: the record is
either whole or it is the torn tail of an append that was never acknowledged.
The cost of a change is then the size of what it changed (one pod plus the
node-wide tables), not the size of everything held.

Files, beside each other in the state directory::

    numaguard_state.json          the base: a checkpoint file (enforcer.state.checkpoint),
                                  unchanged format, data = the engine's document
                                  (``node``, ``topology``, ``config`` ... at its top level)
                                  plus ``journalGeneration``
    numaguard_state.json.bak      the previous base (checkpoint's backup rule)
    numaguard_state.json.journal  one JSON object per line, then NUL padding:
        {"checksum":..,"format":"numaguard-journal","generation":G,"version":1}       header
        {"checksum":..,"ops":[..],"prev":<checksum of the line before>,"seq":N}        record N
        \0\0\0 ... to the end of the file                                              padding

The file is pre-allocated in chunks of ``CHUNK_BYTES`` (1 MiB) of *written* zeros, made
durable with ``fsync`` when the chunk is added (a compaction writes the first chunk with
the header; an append that would not fit adds the next one before it writes).  An append
writes its line in place after the last one, so its ``fdatasync`` flushes data only: the
file's size and extents do not change, and ext4 has no metadata to commit (appends that
grow the file wait for a journal commit on every ``fdatasync``).  Journals written before
the padding (the file ends at its last byte written) read the same way: no padding is
simply an empty one, and the first append pads the file.

A record's ``ops`` are patches of the document, applied in order:
``{"set": [key, ...], "value": v}`` (creating missing objects on the way) or
``{"del": [key, ...]}``.  The store does not interpret the document; the
service decides what a change's patch is (``enforcer.service.persistence``).

Checksums: SHA-256 of the canonical JSON (as ``checkpoint.canonical_json``) of
the line's other fields.  Records chain: ``prev`` is the previous line's
checksum and ``seq`` counts from 1, so a record moved, dropped from the middle
or copied from another journal is reported, not replayed.

Guarantees (the same as a single checkpoint file gives):

* ``append`` is durable before it returns: one ``write`` of the whole line,
  then ``fdatasync``.  The journal's directory entry was made durable when the
  journal was created (temp file, ``fsync``, rename, directory ``fsync``).
* A crash during an append leaves at most a *torn tail* (below): bytes of the
  one line being written.  That append never returned, so no caller was told it
  was durable; the tail is ignored on load, and overwritten with zeros (then
  ``fdatasync``) before the next append writes over it.  Anything else that does
  not verify is corruption (:class:`CheckpointCorruptError`), never skipped:
  skipping a record could hand pinned CPUs out twice.
* Compaction (:meth:`JournaledStore.save`, the full document): write the new
  journal header for generation G+1 to a temp file, save the base (atomic, as a
  checkpoint) with ``journalGeneration`` G+1, then rename the new journal into
  place and ``fsync`` the directory.  A crash between the two renames leaves the
  G+1 base with the G journal, whose records the base already holds: a journal
  exactly one generation behind its base is *stale* and ignored.  Any other
  generation mismatch, a base without a journal, or a journal with records but
  no base, is corruption.  The first save puts the journal in place first, so a
  journal holding only its header and no base means "nothing ever saved".
* ``load`` returns ``None`` only when nothing was ever saved; every decode
  failure of either file is a typed error (``CheckpointCorruptError`` or
  ``CheckpointVersionError``), never a bare ``ValueError``.

End of the journal (what is torn, what is corrupt).  Records are read from the
start while they are whole clean lines (a newline, no NUL byte before it), each
verified; a whole clean line that does not verify is corruption.  The file's
trailing NUL bytes are padding.  What is left between the last verified record
and the padding (the *tail*, it ends in a non-NUL byte) is empty for a clean
journal, else it is a torn append only if every rule holds, and corruption if
any fails:

1. no newline in it except as its very last byte (an unverified record followed
   by anything is corruption: a torn append is always the last write);
2. only bytes a record line is made of (printable ASCII, canonical JSON is ASCII);
3. without NUL bytes in it (a prefix of a line: the write was cut short, the
   SIGKILL case, or an old journal's torn tail), it begins as a record line
   does (``{"checksum":"sha256:``, or a prefix of that), it minus its last byte
   does not verify as a record, and it verifies as a record only if it is the
   record due (its ``prev`` and ``seq``) and its newline was due at a multiple
   of 512 (else it is a whole record whose line end was damaged: a write stops
   short at a sector or page boundary, not one byte before an arbitrary newline);
4. with NUL bytes in it (a *hole*: a power loss where later sectors of the write
   reached the disk and earlier ones did not), every hole is whole sectors of
   ``TORN_UNIT`` (512) bytes: it starts where the tail starts or at a multiple
   of 512, and ends at a multiple of 512; the part before the first hole begins
   as a record line does; and the part after the last hole either ends with the
   exact end of the record that was due (``,"prev":"<last checksum>","seq":N}``
   and the newline, as far as the part reaches) or ends at a multiple of 512.

Why this never loses an acknowledged record: an acknowledged record was written
whole and ``fdatasync``ed, so on disk it is a whole clean line with no NUL byte,
and it is read as a record (or, damaged, raises).  To be taken for a torn tail,
damage would have to turn its bytes in one of its sectors into NUL bytes: a
whole 512 bytes in the middle, its first bytes up to a sector boundary
(``{"checksum"...``, at least 6 set bits), or its bytes in its last sector (at
least the newline's 2 set bits, when the newline alone is in that sector, 1 in
512 records; 8 or more otherwise).  So up to three flipped bits never drop a
record but in that one placement (the tests flip up to three bits anywhere and
check), and no single byte changed does but in the same placements.  That is
the same blind spot as a cut at a line boundary (below), one sector finer.  Why
it never replays a bad record: a torn tail is never replayed, and every record
replayed verified (checksum, ``seq``, ``prev``).
Why a crash is always read as torn: before a line is written, everything after
the last record is durably zero (written zeros at chunk creation; a torn tail
is zeroed and synced before the next append; nothing else is written there),
so a device that writes whole 512-byte sectors leaves each sector of the line
either written or zero; a write cut short leaves a prefix then zeros.  Classed
corrupt although a crash could in theory leave them (and then ``recover-state``
is needed): a device tearing *inside* a 512-byte sector with a later sector
written, and a power loss while the ``write`` was still copying the line into
the page cache *and* the device wrote a later page before an earlier one (the
part after the hole then ends mid-sector).  Garbage after the padding, a flipped
bit in it, or a hole of single NUL bytes are corruption.

A journal cut exactly at a line boundary by damage (not by a crash) looks like
a shorter journal; no append-only log can tell that apart without a second
durable counter, and this store does not keep one.  Bit flips (but in the placement
above), torn middles and reordered lines are always caught.

Recovery (:func:`recover`, ``numaguard recover-state``): ``check`` classifies
base, backup and journal; ``quarantine`` moves all three aside; ``from-backup``
restores the previous base and sets the journal aside (the changes since the
compaction before the last one are lost: drain the node, see
``checkpoint.DRAIN_ADVICE``).

Must not: interpret the document, or be written by anything but its owner
(the running enforcer holds :meth:`claim`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from enforcer.state import checkpoint, errors

log = logging.getLogger(__name__)

FORMAT: Final = "numaguard-journal"
VERSION: Final = 1
GENERATION_KEY: Final = "journalGeneration"
"""The one key of the base's data the store owns: the generation of the journal that continues it."""

CHUNK_BYTES: Final = 1 << 20
"""The journal file grows in chunks of written (and fsynced) zeros, so an append overwrites them in place."""
TORN_UNIT: Final = 512
"""The sector size the end-of-journal rule assumes a device writes whole (the smallest logical sector)."""

_HEADER_KEYS: Final = frozenset({"checksum", "format", "generation", "version"})
_RECORD_KEYS: Final = frozenset({"checksum", "ops", "prev", "seq"})

JournalStatus = Literal["missing", "valid", "stale", "corrupt", "unsupported"]


# -- patches ----------------------------------------------------------------------------


def set_op(path: Sequence[str], value: Any) -> dict[str, Any]:
    return {"set": list(path), "value": value}


def del_op(path: Sequence[str]) -> dict[str, Any]:
    return {"del": list(path)}


def apply_ops(document: dict[str, Any], ops: Sequence[Mapping[str, Any]], *, where: str = "patch") -> None:
    """Apply patches in place; a malformed op raises ValueError naming it (the journal reports it as corruption)."""
    for index, op in enumerate(ops):
        if not isinstance(op, Mapping):
            raise ValueError(f"{where} op {index} is not an object")
        if op.keys() == {"set", "value"}:
            path, deleting = op["set"], False
        elif op.keys() == {"del"}:
            path, deleting = op["del"], True
        else:
            raise ValueError(f"{where} op {index} has keys {sorted(op)}")
        if not isinstance(path, list) or not path or not all(isinstance(k, str) for k in path):
            raise ValueError(f"{where} op {index}: path {path!r} is not a non-empty list of keys")
        parent: Any = document
        for key in path[:-1]:
            child = parent.get(key)
            if child is None:
                if deleting:
                    break
                child = parent[key] = {}
            if not isinstance(child, dict):
                raise ValueError(f"{where} op {index}: {'.'.join(path)} runs through a non-object")
            parent = child
        else:
            if deleting:
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = op["value"]


# -- lines ------------------------------------------------------------------------------


def _checksum(fields: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(checkpoint.canonical_json(fields)).hexdigest()


def _line(fields: dict[str, Any]) -> tuple[bytes, str, bytes]:
    """A line whose ``checksum`` covers every other field (the line itself is canonical JSON), that checksum,
    and the canonical JSON of the other fields.

    The line is the canonical JSON of ``{**fields, "checksum": checksum}``, built from the one encoding the
    checksum needs: canonical JSON sorts keys, and ``"checksum"`` sorts before every other field of a header
    or a record, so the line is ``{"checksum":"sha256:<hex>",`` then that encoding without its ``{``
    (``tests/enforcer/state/test_journal_lines.py`` checks it against the two-encoding construction).
    """
    canonical = checkpoint.canonical_json(fields)
    checksum = "sha256:" + hashlib.sha256(canonical).hexdigest()
    return b'{"checksum":"%s",%s\n' % (checksum.encode("ascii"), canonical[1:]), checksum, canonical


def header_line(generation: int) -> tuple[bytes, str]:
    line, checksum, _ = _line({"format": FORMAT, "generation": generation, "version": VERSION})
    return line, checksum


def record_line(seq: int, prev: str, ops: Sequence[Mapping[str, Any]], *, path: str = "journal") -> tuple[bytes, str]:
    """Raises CheckpointWriteError for ops that are not plain JSON (tuples, NaN, non-string keys)."""
    listed = list(ops)
    try:
        line, checksum, canonical = _line({"ops": listed, "prev": prev, "seq": seq})
    except (TypeError, ValueError) as error:
        raise errors.CheckpointWriteError(path, f"cannot journal the change: not plain JSON: {error}") from None
    if not _plain(listed) and json.loads(canonical)["ops"] != listed:
        raise errors.CheckpointWriteError(path, "cannot journal the change: it would not load back equal")
    return line, checksum


_PLAIN_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> bool:
    """Whether ``value`` is made of exactly ``dict`` (``str`` keys), ``list`` and the JSON scalars, no subclasses.

    Such a value loads back equal from its canonical JSON whenever that encoding succeeded (finite floats
    repr exactly), so :func:`record_line` needs no load-back for it; anything else (a tuple, an ``int`` key,
    a subclass) still gets the load-back comparison.  A walk costs less than a parse plus a comparison.
    """
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (type(item) not in _PLAIN_SCALARS and not _plain(item)):
                return False
        return True
    if kind is list:
        for item in value:  # noqa: SIM110 (a loop: all() over a generator costs a frame per item)
            if type(item) not in _PLAIN_SCALARS and not _plain(item):
                return False
        return True
    return kind in _PLAIN_SCALARS


@dataclass(frozen=True, slots=True)
class JournalContents:
    """A journal as read: its generation, verified records, and where the good bytes end."""

    generation: int
    records: tuple[tuple[dict[str, Any], ...], ...]  # each record's ops
    last_checksum: str
    good_bytes: int
    torn_bytes: int


def parse_journal(raw: bytes, *, path: str) -> JournalContents:
    """Verify a journal's bytes; every failure is CheckpointCorruptError or CheckpointVersionError.

    Lines are read from the start up to the NUL padding; where the bytes stop being whole clean
    lines, :func:`_check_tail` decides between a torn append (ignored) and damage (raised).
    """
    content = raw.rstrip(b"\0")
    stop = len(content)
    newline = content.find(b"\n")
    if newline < 0 or b"\0" in content[:newline]:
        raise errors.CheckpointCorruptError(path, "the journal has no complete header line")
    header = _verified(content[:newline], path=path, number=1, keys=_HEADER_KEYS)
    if header["format"] != FORMAT:
        raise errors.CheckpointVersionError(path, f"foreign journal format {header['format']!r}")
    version = header["version"]
    if version != VERSION:
        raise errors.CheckpointVersionError(
            path, f"journal version {version!r}; this build reads version {VERSION}", found_version=version
        )
    generation = header["generation"]
    if not _is_count(generation):
        raise errors.CheckpointCorruptError(path, f"journal header: generation {generation!r} is not a count")
    prev = str(header["checksum"])
    records: list[tuple[dict[str, Any], ...]] = []
    start, number = newline + 1, 2
    while start < stop:
        newline = content.find(b"\n", start)
        if newline < 0 or content.find(b"\0", start, newline) >= 0:
            _check_tail(content, start, seq=number - 1, prev=prev, path=path, number=number)
            break
        record = _verified(content[start:newline], path=path, number=number, keys=_RECORD_KEYS)
        if record["seq"] != number - 1:
            detail = f"journal line {number}: seq {record['seq']!r}, expected {number - 1}"
            raise errors.CheckpointCorruptError(path, detail)
        if record["prev"] != prev:
            raise errors.CheckpointCorruptError(path, f"journal line {number}: does not follow line {number - 1}")
        ops = record["ops"]
        if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
            raise errors.CheckpointCorruptError(path, f"journal line {number}: ops is not a list of objects")
        records.append(tuple(ops))
        prev = str(record["checksum"])
        start, number = newline + 1, number + 1
    return JournalContents(generation, tuple(records), prev, start, stop - start)


_LINE_BYTES: Final = bytes(range(0x20, 0x80))  # what canonical (ASCII, escaped) JSON is made of, before its newline
_RECORD_HEAD: Final = b'{"checksum":"sha256:'  # how every record line starts (sorted keys)
_NUL_RUN: Final = re.compile(rb"\0+")


def _check_tail(content: bytes, start: int, *, seq: int, prev: str, path: str, number: int) -> None:
    """Raise unless ``content[start:]`` (non-empty, NUL padding already stripped) is a torn append of record ``seq``.

    The rule, and why it is exact, is the module docstring's "End of the journal".
    """
    tail = content[start:]
    where = f"journal line {number}"
    ending = f',"prev":"{prev}","seq":{seq}}}\n'.encode("ascii")  # how the record due ends (sorted keys)

    def damaged(why: str) -> errors.CheckpointCorruptError:
        return errors.CheckpointCorruptError(path, f"{where}: {why}")

    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) - 1:
        raise damaged("a record that does not verify is followed by more data")
    if tail.translate(None, _LINE_BYTES + b"\0\n"):
        raise damaged("bytes no record line holds (not a torn append)")
    holes = [(start + m.start(), start + m.end()) for m in _NUL_RUN.finditer(tail)]
    if not holes:  # a prefix of a line then (if anything) NUL padding: what a write cut short leaves
        whole = _verifies(tail, path=path)
        if whole and (start + len(tail)) % TORN_UNIT == 0 and tail.endswith(ending[:-1]):
            return  # all but the newline, which would begin a sector: that sector was not written
        if whole or (len(tail) > 1 and _verifies(tail[:-1], path=path)):
            raise damaged("its line end is damaged")
        if tail[: len(_RECORD_HEAD)] != _RECORD_HEAD[: len(tail)]:
            raise damaged("does not begin as a record (not a torn append)")
        return
    for begin, end in holes:
        if (begin != start and begin % TORN_UNIT) or end % TORN_UNIT:
            raise damaged(f"NUL bytes at {begin}-{end} that no torn write of whole {TORN_UNIT}-byte sectors leaves")
    first, last = content[start : holes[0][0]], content[holes[-1][1] :]
    if first and first[: len(_RECORD_HEAD)] != _RECORD_HEAD[: len(first)]:
        raise damaged("does not begin as a record (not a torn append)")
    if last.endswith(b"\n"):
        if not (ending.endswith(last) or last.endswith(ending)):
            raise damaged(f"its last sector does not end record {seq} (not a torn append)")
    elif len(content) % TORN_UNIT:
        raise damaged("written bytes after a NUL hole end inside a sector (not a torn append)")


def _verifies(line: bytes, *, path: str) -> bool:
    try:
        _verified(line, path=path, number=0, keys=_RECORD_KEYS)
    except errors.CheckpointError:
        return False
    return True


def _verified(line: bytes, *, path: str, number: int, keys: frozenset[str]) -> dict[str, Any]:
    where = f"journal line {number}"
    try:
        value = checkpoint.parse_json(line.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise errors.CheckpointCorruptError(path, f"{where}: not UTF-8 text (byte {error.start})") from None
    except (ValueError, RecursionError) as error:  # JSONDecodeError is a ValueError
        raise errors.CheckpointCorruptError(path, f"{where}: not JSON: {error}") from None
    if not isinstance(value, dict) or value.keys() != keys:
        found = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise errors.CheckpointCorruptError(path, f"{where}: damaged: fields are {found}")
    fields = {k: v for k, v in value.items() if k != "checksum"}
    try:
        actual = _checksum(fields)
    except (TypeError, ValueError, RecursionError) as error:
        raise errors.CheckpointCorruptError(path, f"{where}: not plain JSON: {error}") from None
    if actual != value["checksum"]:
        raise errors.CheckpointCorruptError.checksum_mismatch(
            f"{path} ({where})", expected=str(value["checksum"]), actual=actual
        )
    return value


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# -- the store --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredState:
    """What both files hold together, as read."""

    document: dict[str, Any] | None  # None: nothing was ever saved
    generation: int
    journal: JournalContents | None  # None: missing, or stale (one generation behind the base)
    journal_status: JournalStatus


class JournaledStore:
    """The base checkpoint and its journal; see the module docstring for the protocol."""

    def __init__(self, path: Path | str, *, keep_backup: bool = True, chunk_bytes: int = CHUNK_BYTES) -> None:
        if chunk_bytes < TORN_UNIT or chunk_bytes % TORN_UNIT:
            raise ValueError(f"chunk_bytes {chunk_bytes} is not a positive multiple of {TORN_UNIT}")
        self.chunk_bytes = chunk_bytes
        self.base = checkpoint.CheckpointStore(path, keep_backup=keep_backup)
        self.path = self.base.path
        self.journal_path = self.path.with_name(self.path.name + ".journal")
        self._fd: int | None = None
        self._generation = 0
        self._seq = 0
        self._prev = ""
        self._journal_bytes = 0
        self._torn_bytes = 0  # a torn append's bytes after _journal_bytes, to be zeroed before the next append
        self._file_bytes = 0  # the journal file's size (records, then NUL padding) while open
        self._base_bytes = 0
        self._appendable = False  # the journal on disk continues the base and ends where this store thinks

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def backup_path(self) -> Path:
        return self.base.backup_path

    @property
    def journal_bytes(self) -> int:
        """Bytes of the journal's lines since the last compaction (header included; not the NUL padding)."""
        return self._journal_bytes

    @property
    def base_bytes(self) -> int:
        return self._base_bytes

    @property
    def records(self) -> int:
        return self._seq

    # -- reading ----------------------------------------------------------------------
    def read(self) -> StoredState:
        """Both files verified and combined, without changing anything; raises typed errors on damage."""
        journal_raw = self._read(self.journal_path)
        data = self.base.load()
        if data is None:
            if journal_raw is None:
                return StoredState(None, 0, None, "missing")
            contents = parse_journal(journal_raw, path=str(self.journal_path))
            if contents.records:
                raise errors.CheckpointCorruptError(
                    str(self.path), f"the state file is missing but its journal {self.journal_path.name} holds changes"
                )
            return StoredState(None, 0, contents, "valid")  # a first save that stopped before its base
        generation = data.pop(GENERATION_KEY, 0)
        if not _is_count(generation):
            raise errors.CheckpointCorruptError(str(self.path), f"{GENERATION_KEY} {generation!r} is not a count")
        if journal_raw is None:
            if generation == 0:  # a base written before journals existed: nothing follows it
                return StoredState(data, 0, None, "missing")
            raise errors.CheckpointCorruptError(
                str(self.path), f"its journal {self.journal_path.name} (generation {generation}) is missing"
            )
        contents = parse_journal(journal_raw, path=str(self.journal_path))
        if contents.generation == generation - 1:
            return StoredState(data, generation, None, "stale")  # compaction stopped between its two renames
        if contents.generation != generation:
            raise errors.CheckpointCorruptError(
                str(self.journal_path),
                f"journal generation {contents.generation} does not continue state file generation {generation}",
            )
        for number, ops in enumerate(contents.records, start=2):
            try:
                apply_ops(data, ops, where=f"journal line {number}")
            except ValueError as error:
                raise errors.CheckpointCorruptError(str(self.journal_path), str(error)) from None
        return StoredState(data, generation, contents, "valid")

    def load(self) -> dict[str, Any] | None:
        """The saved document (base + journal), or None when nothing was ever saved; raises on damage."""
        state = self.read()
        self._close()
        self._generation = state.generation
        self._appendable = state.journal is not None and state.document is not None
        self._torn_bytes = 0
        if state.journal is not None and state.document is not None:
            self._seq = len(state.journal.records)
            self._prev = state.journal.last_checksum
            self._journal_bytes = state.journal.good_bytes
            self._torn_bytes = state.journal.torn_bytes
            if state.journal.torn_bytes:
                log.warning(
                    "journal ends in a torn append (never acknowledged); it is zeroed before the next append",
                    extra={"path": str(self.journal_path), "bytes": state.journal.torn_bytes},
                )
        with contextlib.suppress(OSError):
            self._base_bytes = self.path.stat().st_size
        return state.document

    def status(self) -> tuple[checkpoint.FileStatus, str]:
        """Base and journal classified together, without raising (for ``recover-state``)."""
        try:
            state = self.read()
        except errors.CheckpointVersionError as error:
            return "unsupported", error.message
        except errors.CheckpointError as error:
            return "corrupt", error.message
        if state.document is None:
            return "missing", f"{self.path} does not exist"
        records = 0 if state.journal is None else len(state.journal.records)
        return "valid", (
            f"{self.path} is a valid {checkpoint.FORMAT} file, generation {state.generation}; journal "
            f"{state.journal_status} with {records} change(s)"
        )

    def _read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise errors.CheckpointError(str(path), f"cannot read {path}: {error}") from None

    # -- writing ----------------------------------------------------------------------
    def save(self, document: dict[str, Any]) -> None:
        """Compaction: the whole document as a new base with an empty journal (see the module docstring)."""
        generation = self._generation + 1
        first = not self.path.exists()
        self._close()
        self._appendable = False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.remove_temp_files()
            header, header_checksum = header_line(generation)
            temp = self._temp()
            checkpoint.write_durably(temp, header + bytes(self._chunks_for(len(header)) - len(header)))
            try:
                if first:  # the journal goes first: "header only, no base" reads as never saved
                    os.replace(temp, self.journal_path)
                    checkpoint.fsync_directory(self.directory)
                self.base.save({**document, GENERATION_KEY: generation})
                if not first:
                    os.replace(temp, self.journal_path)
                    checkpoint.fsync_directory(self.directory)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    temp.unlink()
        except OSError as error:
            raise errors.CheckpointWriteError(str(self.path), f"cannot save state to {self.path}: {error}") from None
        self._generation, self._seq, self._prev = generation, 0, header_checksum
        self._journal_bytes = len(header)
        self._torn_bytes = 0
        self._appendable = True
        with contextlib.suppress(OSError):
            self._base_bytes = self.path.stat().st_size

    def append(self, ops: Sequence[Mapping[str, Any]]) -> None:
        """Make one change durable: one line over the NUL padding, one ``fdatasync``.  Raises CheckpointWriteError.

        The file's size changes only when the line does not fit the padding left: then one more chunk of
        zeros is written and ``fsync``ed first (once per :attr:`chunk_bytes` of lines).  After a failure the
        journal's tail is unknown: the next call must be :meth:`save`.
        """
        line, checksum = record_line(self._seq + 1, self._prev, ops, path=str(self.journal_path))
        try:
            fd = self._open_for_append()
            end = self._journal_bytes + len(line)
            if end > self._file_bytes:
                self._extend(fd, self._chunks_for(end))
            _write_at(fd, line, self._journal_bytes)
            os.fdatasync(fd)
            self._check_reachable(fd)
        except OSError as error:
            self._close()
            self._appendable = False  # unknown tail: appends are refused until a save
            raise errors.CheckpointWriteError(
                str(self.journal_path), f"cannot append to {self.journal_path}: {error}"
            ) from None
        self._seq += 1
        self._prev = checksum
        self._journal_bytes += len(line)

    def _check_reachable(self, fd: int) -> None:
        """The line is durable only if the journal's path still leads to the file written (not moved or replaced)."""
        on_disk, written = os.stat(self.journal_path), os.fstat(fd)
        if (on_disk.st_dev, on_disk.st_ino) != (written.st_dev, written.st_ino):
            raise OSError(f"{self.journal_path} was replaced while open; the change is not reachable by its path")

    def _open_for_append(self) -> int:
        if self._fd is not None:
            return self._fd
        if not self._appendable:
            raise OSError("the journal does not continue the saved state (stale, missing or a failed append)")
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size < self._journal_bytes + self._torn_bytes:
                raise OSError(f"{self.journal_path} is shorter than when it was read ({size} bytes)")
            if self._torn_bytes:  # a torn append from a crash: zeros again, durably, before a line goes over it
                _write_at(fd, bytes(self._torn_bytes), self._journal_bytes)
                os.fdatasync(fd)
                self._torn_bytes = 0
        except OSError:
            os.close(fd)
            raise
        self._fd, self._file_bytes = fd, size
        return fd

    def _chunks_for(self, used: int) -> int:
        """The file size that holds ``used`` bytes of lines: whole chunks, with room left after them."""
        return (used // self.chunk_bytes + 1) * self.chunk_bytes

    def _extend(self, fd: int, size: int) -> None:
        """Grow the file to ``size`` with written zeros (not holes or unwritten extents), durably, size included."""
        _write_at(fd, bytes(size - self._file_bytes), self._file_bytes)
        os.fsync(fd)
        self._file_bytes = size

    @property
    def needs_save(self) -> bool:
        """Whether the next change must be a :meth:`save` (nothing saved yet, a stale journal, a failed append)."""
        return not self._appendable

    def _close(self) -> None:
        self._file_bytes = 0
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close()

    def _temp(self) -> Path:
        """A new journal's temp file (not the base's ``.tmp-`` prefix: the base's save removes those)."""
        return self.directory / f".{self.journal_path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"

    def remove_temp_files(self) -> None:
        """Delete journal temp files a crashed compaction left behind (the base removes its own)."""
        prefix = f".{self.journal_path.name}.tmp-"
        with os.scandir(self.directory) as entries:
            leftovers = [self.directory / entry.name for entry in entries if entry.name.startswith(prefix)]
        for leftover in leftovers:
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()

    # -- ownership --------------------------------------------------------------------
    def claim(self) -> checkpoint.StateClaim:
        return self.base.claim()

    def is_claimed(self) -> bool:
        return self.base.is_claimed()


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


# -- recovery ---------------------------------------------------------------------------


def recover(
    path: Path | str,
    *,
    mode: checkpoint.RecoveryMode,
    force: bool = False,
    now: datetime | None = None,
) -> checkpoint.RecoveryResult:
    """``recover-state`` over base, backup and journal; see the module docstring.  Stop the enforcer first."""
    store = JournaledStore(path)
    status, detail = store.status()
    journal_status, journal_detail = _journal_status(store)
    if mode == "check":
        inner = checkpoint.recover(store.path, mode="check", store=store.base)
        report = (f"state: {status}: {detail}", *inner.actions, f"journal: {journal_status}: {journal_detail}")
        return checkpoint.RecoveryResult(mode, status, report)
    if status == "valid" and not force:
        what = "quarantine it" if mode == "quarantine" else "replace it with the older backup"
        raise errors.RecoveryError(
            str(store.path), f"{store.path} and its journal are valid; refusing to {what} without --force"
        )
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    inner = checkpoint.recover(store.path, mode=mode, force=True, now=now, store=store.base, restored_note=None)
    actions = [f"state: {status}: {detail}", f"journal: {journal_status}: {journal_detail}", *inner.actions]
    moved = list(inner.moved)
    try:
        if store.journal_path.exists():
            target = checkpoint.free_name(store.directory / f"{store.journal_path.name}.corrupt-{stamp}")
            os.replace(store.journal_path, target)
            moved.append((store.journal_path, target))
            actions.append(f"moved {store.journal_path} to {target}")
        if mode == "from-backup":
            generation = _base_generation(store)
            temp = store._temp()
            checkpoint.write_durably(temp, header_line(generation)[0])
            os.replace(temp, store.journal_path)
            actions.append(f"started an empty journal for the restored state (generation {generation})")
            actions.append(
                "the backup is the state as of the compaction before the last one: every change journaled since is "
                "missing. " + checkpoint.DRAIN_ADVICE
            )
        checkpoint.fsync_directory(store.directory)
    except OSError as error:
        raise errors.RecoveryError(str(store.path), f"recover-state {mode} failed: {error}") from None
    return checkpoint.RecoveryResult(
        mode, status, tuple(actions), moved=tuple(moved), restored_from=inner.restored_from
    )


def _journal_status(store: JournaledStore) -> tuple[JournalStatus, str]:
    try:
        raw = store._read(store.journal_path)
        if raw is None:
            return "missing", f"{store.journal_path} does not exist"
        contents = parse_journal(raw, path=str(store.journal_path))
    except errors.CheckpointVersionError as error:
        return "unsupported", error.message
    except errors.CheckpointError as error:
        return "corrupt", error.message
    torn = f", a torn tail of {contents.torn_bytes} bytes" if contents.torn_bytes else ""
    return "valid", f"generation {contents.generation}, {len(contents.records)} change(s){torn}"


def _base_generation(store: JournaledStore) -> int:
    data = store.base.load()
    generation = 0 if data is None else data.get(GENERATION_KEY, 0)
    return generation if _is_count(generation) else 0

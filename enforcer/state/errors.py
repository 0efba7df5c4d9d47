"""Errors of the enforcer's durable state file.

A bad state file must stop the enforcer loudly: starting from an empty state
while pods still hold exclusive CPUs would hand those CPUs out twice.  Each
error therefore names the file and says what was found, and the message for a
damaged file starts with the kubelet's own words, "checkpoint is corrupted".
Recovery is an operator decision (``numaguard recover-state``), never automatic.
"""

from __future__ import annotations

from enforcer.errors import EnforcerError

KUBELET_CORRUPT_MESSAGE = "checkpoint is corrupted"
"""The kubelet's ``errors.ErrCorruptCheckpoint`` text, reused so operators recognise the situation."""


class StateError(EnforcerError):
    """Base class of the state store's errors."""

    reason = "StateError"


class CheckpointError(StateError):
    """A state file could not be read or written; ``path`` names it."""

    reason = "CheckpointError"

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class CheckpointCorruptError(CheckpointError):
    """The file is damaged: empty, truncated, not JSON, not our envelope, or its checksum does not match."""

    reason = "CheckpointCorrupt"

    def __init__(
        self, path: str, detail: str, *, expected_checksum: str | None = None, actual_checksum: str | None = None
    ) -> None:
        super().__init__(path, f"{KUBELET_CORRUPT_MESSAGE}: {path}: {detail}")
        self.detail = detail
        self.expected_checksum = expected_checksum
        self.actual_checksum = actual_checksum

    @classmethod
    def checksum_mismatch(cls, path: str, *, expected: str, actual: str) -> CheckpointCorruptError:
        return cls(
            path,
            f"checksum mismatch: the file records {expected}, its data hashes to {actual}",
            expected_checksum=expected,
            actual_checksum=actual,
        )


class CheckpointVersionError(CheckpointError):
    """The file is intact but not ours to read: a foreign format, or a version with no upgrade path."""

    reason = "CheckpointVersionUnsupported"

    def __init__(self, path: str, detail: str, *, found_format: object = None, found_version: object = None) -> None:
        super().__init__(path, f"cannot read state file {path}: {detail}")
        self.detail = detail
        self.found_format = found_format
        self.found_version = found_version


class CheckpointWriteError(CheckpointError):
    """Saving failed (disk, permissions, or data that is not plain JSON); the previous file is untouched."""

    reason = "CheckpointWriteError"


class RecoveryError(CheckpointError):
    """``recover-state`` could not do what was asked (no valid backup, a healthy file without ``--force``)."""

    reason = "StateRecoveryError"

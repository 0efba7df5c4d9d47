"""A throw-away journaled ext4 for benchmarks: a sparse image file, ``mkfs.ext4``, a loop device, a mount.

``with ext4_loop() as mountpoint:`` makes a 512 MiB sparse file under a fresh temporary directory,
formats it with ``mkfs.ext4 -q`` (default options, so the filesystem has a journal), attaches it
to a free loop device (``losetup --find --show``), mounts it and yields the mount point.  On the
way out, also after an exception or Ctrl-C, it unmounts, detaches every loop device backed by the
image (found again with ``losetup --associated``, so a device attached just before an interrupt is
not missed) and deletes the image; SIGINT and SIGTERM are held back while it does, and SIGTERM is
turned into an exception for the duration so it too cleans up.  It needs root and the util-linux /
e2fsprogs tools; without them it raises :class:`Ext4LoopUnavailable` with the reason, before
touching anything (a failing step later raises it too, after cleaning up); a clean-up that leaves a
mount or a device behind raises :class:`Ext4LoopLeftBehind`.

Also :func:`describe`: the filesystem type, device and (for ext4) whether it has a journal, of
the filesystem holding a directory, from ``/proc/self/mountinfo`` and ``/sys/fs/ext4``.

This module is a measuring tool: it must not be imported by product code.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

IMAGE_BYTES = 512 * 1024 * 1024
TOOLS = ("mkfs.ext4", "losetup", "mount", "umount")
_HELD = {signal.SIGINT, signal.SIGTERM}


class Ext4LoopUnavailable(RuntimeError):
    """The loop-mounted ext4 cannot be made here (not root, a tool missing, or a step failed)."""


class Ext4LoopLeftBehind(RuntimeError):
    """Clean-up failed: a mount or a loop device is left; the message says which."""


def unavailable_reason() -> str | None:
    """Why :func:`ext4_loop` cannot run here, or None if it can."""
    if os.geteuid() != 0:
        return "needs root (losetup and mount)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install util-linux mount e2fsprogs)"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control (no loop device support here)"
    return None


def _run(command: list[str]) -> str:
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        detail = (finished.stderr or finished.stdout).strip()
        raise Ext4LoopUnavailable(f"`{' '.join(command)}` failed ({finished.returncode}): {detail}")
    return finished.stdout


def loop_devices_of(image: Path) -> list[str]:
    """The loop devices currently backed by ``image`` (``losetup --associated``)."""
    out = subprocess.run(
        ["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    return [name.strip() for name in out.splitlines() if name.strip()]


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While inside, SIGTERM raises KeyboardInterrupt (main thread only), so ``finally`` blocks run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _clean_up(image: Path, mountpoint: Path) -> list[str]:
    """Unmount, detach, delete; every step tried even if one fails.  Returns what failed."""
    problems = []
    if os.path.ismount(mountpoint):
        finished = subprocess.run(["umount", str(mountpoint)], capture_output=True, text=True, check=False)
        if finished.returncode != 0:  # something still open under it: detach it lazily rather than leave it
            subprocess.run(["umount", "--lazy", str(mountpoint)], capture_output=True, text=True, check=False)
        if os.path.ismount(mountpoint):
            problems.append(f"{mountpoint} is still mounted: {finished.stderr.strip()}")
    for device in loop_devices_of(image):
        finished = subprocess.run(["losetup", "--detach", device], capture_output=True, text=True, check=False)
        if finished.returncode != 0:
            problems.append(f"losetup --detach {device}: {finished.stderr.strip()}")
    with contextlib.suppress(FileNotFoundError):
        image.unlink()
    return problems


@contextlib.contextmanager
def ext4_loop(parent: Path | None = None, *, size: int = IMAGE_BYTES) -> Iterator[Path]:
    """A freshly formatted, journaled ext4 mounted on a loop device; all of it removed on exit."""
    reason = unavailable_reason()
    if reason is not None:
        raise Ext4LoopUnavailable(reason)
    with _sigterm_raises(), tempfile.TemporaryDirectory(prefix="bench-ext4-loop-", dir=parent) as workdir:
        image, mountpoint = Path(workdir) / "ext4.img", Path(workdir) / "mnt"
        mountpoint.mkdir()
        try:
            with open(image, "wb") as f:
                f.truncate(size)  # sparse: blocks are allocated as the filesystem writes them
            _run(["mkfs.ext4", "-q", "-F", str(image)])
            device = _run(["losetup", "--find", "--show", str(image)]).strip()
            _run(["mount", "-t", "ext4", device, str(mountpoint)])
            yield mountpoint
        finally:
            held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
            try:
                problems = _clean_up(image, mountpoint)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            if problems:
                raise Ext4LoopLeftBehind("clean-up incomplete: " + "; ".join(problems))


def describe(directory: Path) -> str:
    """``ext4 on loop3, with a journal`` / ``ext4 on vda, without a journal`` / ``tmpfs`` for ``directory``."""
    dev = os.stat(directory).st_dev
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    fstype = "unknown filesystem"
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as mountinfo:
        for row in mountinfo:
            fields = row.split()
            if len(fields) > 2 and fields[2] == wanted and "-" in fields:
                fstype = fields[fields.index("-") + 1]
                break
    block = Path(f"/sys/dev/block/{wanted}")
    if not block.exists():
        return fstype
    name = block.resolve().name
    text = f"{fstype} on {name}"
    journal = Path(f"/sys/fs/ext4/{name}/journal_task")
    if fstype == "ext4" and journal.exists():
        has = journal.read_text().strip() not in ("", "<none>")
        text += ", with a journal" if has else ", without a journal"
    return text

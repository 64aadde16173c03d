"""A real full disk for tests: a small tmpfs mounted for the test (the tests run as root, as in CI)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(folder: Path, size_mb: int) -> Iterator[Path]:
    """`folder` as a file system of `size_mb` MB of its own; the test is skipped, with the reason,
    where it cannot be mounted (not root, no CAP_SYS_ADMIN, no `mount`)."""
    folder.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    if os.geteuid() != 0 or mount is None:
        pytest.skip("a full disk is made by mounting a small tmpfs, which needs root and `mount`")
    done = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"a small tmpfs cannot be mounted here ({done.stderr.strip()}): no real full disk to test on")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(disk: Path, leave_bytes: int) -> Path:
    """Take the disk's free space down to `leave_bytes` with one file (removed to free the space)."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    free = shutil.disk_usage(disk).free
    with open(filler, "wb") as handle:
        if free > leave_bytes:
            os.posix_fallocate(handle.fileno(), 0, free - leave_bytes)
    if leave_bytes == 0:  # what fallocate's rounding left, written until the disk refuses
        fd = os.open(filler, os.O_WRONLY | os.O_APPEND)
        try:
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * 4096):
                    pass
        finally:
            os.close(fd)
    return filler

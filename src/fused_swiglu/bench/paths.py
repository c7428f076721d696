"""Where a benchmark writes its results: the ``--out`` path checked before a run (no PyTorch import, so that a bad
path is reported at once)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def check_out_path(path: str | Path, option: str = "--out", beside: str = ".csv") -> Path:
    """Check, before a run, that results can be written to ``path`` (JSON) and beside it (the ``beside``
    file: ``.csv``, or ``.png`` for a mode that writes a plot there).
    Creates no folder (the folder is made when the results are written); to prove that the nearest
    existing folder takes new files, one empty probe file is created there and removed at once.

    Returns:
        ``path`` as a Path.

    Raises:
        ValueError: ``path`` ends in ``beside`` (that file would overwrite the JSON), names a directory
            (or ends in a path separator), or its folder cannot be created or written; the message
            names ``option``.
    """
    text = str(path)
    path = Path(path)
    if path.suffix.lower() == beside:
        what = "plot" if beside == ".png" else beside.lstrip(".").upper()
        raise ValueError(f"{option} names the JSON file (its {what} goes beside it as {beside}); got {path}")
    if path.is_dir() or text.endswith(("/", os.sep)):
        raise ValueError(f"{option} must be a file path, not a directory; got {text!r}")
    existing = path.parent.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option}: cannot create the folder {path.parent} ({existing} is not a directory)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{option}: the folder {existing} is not writable")
    try:  # os.access trusts permission bits: root passes it on read-only and virtual file systems
        fd, probe = tempfile.mkstemp(prefix=".fused-swiglu-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        # a virtual file system (/proc, /sys) answers "No such file or directory" for a folder that exists
        why = "its file system takes no new files" if e.errno == errno.ENOENT else (e.strerror or str(e))
        if existing != path.parent.absolute():
            raise ValueError(f"{option}: cannot create the folder {path.parent}: {existing} takes no new files "
                             f"({why})") from e
        raise ValueError(f"{option}: cannot write in the folder {existing} ({why})") from e
    return path

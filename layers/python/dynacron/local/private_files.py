"""Paths only their owner may read: local mode's data directory and database, and
an API key file.

The database holds every tenant's tasks, payloads and signing secrets, and a key
file the keys themselves: a machine's other users must not read them (issue 23:
the directory was 0755 and the database 0644). What is created here is created
private (0700, 0600, whatever the umask); what exists already and is open to
others stops local mode with the ``chmod`` that fixes it, never a traceback.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterable
from pathlib import Path

PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o600
_OTHERS = stat.S_IRWXG | stat.S_IRWXO


class UnusablePath(ValueError):
    """A path local mode will not use as it is: why, and what fixes it."""


def private_directory(path: Path) -> None:
    """Create ``path`` (0700) if missing; refuse one that is not a directory, that
    others may open, or that this user cannot write."""
    try:
        path.mkdir(mode=PRIVATE_DIRECTORY, parents=True)
        path.chmod(PRIVATE_DIRECTORY)  # exactly, whatever the umask
    except FileExistsError:
        if not path.is_dir():
            raise UnusablePath(
                f"{path} is a file, not a directory: give --data-dir a directory "
                "(it is created if missing)"
            ) from None
    except OSError as error:
        raise UnusablePath(
            f"cannot create the data directory {path}: {error.strerror}. "
            "Give --data-dir a directory this user may create"
        ) from None
    refuse_shared([path], "700")
    if not _writable(path, stat.S_IRWXU):
        raise UnusablePath(
            f"{path} is read-only (SQLite writes its journal beside the database): "
            f"chmod 700 {shlex.quote(str(path))}, or give another --data-dir"
        )


def private_file(path: Path) -> None:
    """Create ``path`` empty (0600) if missing; refuse one others may read or this
    user cannot write."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE))
    except FileExistsError:
        pass  # kept as it is, if private
    except OSError as error:
        raise UnusablePath(f"cannot create {path}: {error.strerror}") from None
    refuse_shared([path], "600")
    if not _writable(path, stat.S_IRUSR | stat.S_IWUSR):
        raise UnusablePath(f"{path} is read-only: chmod 600 {shlex.quote(str(path))}")


def _writable(path: Path, owner_bits: int) -> bool:
    """Whether this user may write ``path``, and its mode says its owner may (root
    may write anything: a mode without the owner's write is read-only all the same)."""
    access = os.R_OK | os.W_OK | (os.X_OK if path.is_dir() else 0)
    return os.access(path, access) and path.stat().st_mode & owner_bits == owner_bits


def read_private_file(path: Path) -> str:
    """The text of ``path``, which others may not read (a file of secrets)."""
    if not path.is_file():
        raise UnusablePath(f"{path} is not a file")
    refuse_shared([path], "600")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UnusablePath(f"cannot read {path}: {error}") from None


def refuse_shared(paths: Iterable[Path], mode: str) -> None:
    """``UnusablePath`` naming ``chmod mode`` for those of ``paths`` that exist and
    that a group or others may open."""
    if os.name != "posix":
        return  # no mode bits to read: the platform's own ACLs decide
    shared = []
    for path in paths:
        try:
            bits = path.stat().st_mode
        except FileNotFoundError:
            continue
        if bits & _OTHERS:
            shared.append((path, stat.S_IMODE(bits)))
    if shared:
        which = ", ".join(f"{path} (mode {bits:04o})" for path, bits in shared)
        names = " ".join(shlex.quote(str(path)) for path, _ in shared)
        raise UnusablePath(
            f"other users of this machine may open {which}: it holds secrets "
            f"(signing secrets, payloads, API keys). Make it yours alone: chmod {mode} {names}"
        )

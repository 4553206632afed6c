"""Folders and files that root writes, made so that nobody else can steer them.

hpnlab runs as root and writes where its users point it (`--out`,
`--run-dir`), often in shared places such as /tmp. A folder someone else
made, or one they can write into (or one above it that they can replace),
lets them plant a symbolic link that makes root overwrite another file, or
swap a file between its writing and its use. So:
- a path is resolved once (symbolic links followed, a trailing slash too)
  and only the result is used; every folder from / down to it must be
  root's or yours, and writable by others only with the sticky bit (/tmp);
- a run folder (host scripts, sockets, the controller's files, logs,
  agents' configurations) is new or empty and root's, mode 0700: nobody
  else can enter it, so nothing in it can be swapped;
- a report folder is new or empty, yours, and writable by you alone; with
  `force`, an earlier report in it is removed first, and only when it holds
  nothing but what hpnlab writes, so that no earlier run's files are ever
  read as this run's.
"""

import fnmatch
import os
import shutil
import stat
import tempfile


class FolderError(RuntimeError):
    """A folder hpnlab was told to use is not one it can safely write in."""


# What `hpnlab run` writes into its report folder (and what a calibration
# adds): the only names --force removes.
REPORT_NAMES = (
    "results.json",
    "summary.md",
    "*.png",
    "fabric.svg",
    "capture-*.pcap",
    "run",
    "calibration-ring.yaml",
    ".tmp-*",
)


def _owners():
    """Who may own a folder root writes in: root, and the user who ran sudo."""
    owners = {0, os.geteuid()}
    sudo_uid = os.environ.get("SUDO_UID", "")
    if sudo_uid.isdigit():
        owners.add(int(sudo_uid))
    return owners


def _resolved(path):
    """The folder `path` names, every symbolic link in it followed once
    (a trailing slash included): from here on only this path is used, so
    a link someone changes afterwards leads nowhere new."""
    return os.path.realpath(os.path.abspath(path))


def _check_chain(path):
    """Refuse `path` (resolved) when someone other than root or you could
    replace a folder on the way to it: every existing folder from / down
    must be yours or root's, and writable by others only with the sticky
    bit (as /tmp is: there nobody may rename what is not theirs)."""
    owners, parts = _owners(), path.split(os.sep)
    for depth in range(1, len(parts) + 1):
        here = os.sep.join(parts[:depth]) or os.sep
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            return  # what follows does not exist yet: hpnlab will create it
        if stat.S_ISLNK(info.st_mode):  # only if it was just swapped in: refuse
            raise FolderError(f"{here} became a symbolic link while hpnlab looked at it")
        if not stat.S_ISDIR(info.st_mode):
            raise FolderError(f"{here} exists and is not a folder")
        if info.st_uid not in owners:
            raise FolderError(
                f"{here} belongs to uid {info.st_uid}, not to you or root: choose a folder of your own"
            )
        shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if shared and (here == path or not info.st_mode & stat.S_ISVTX):
            raise FolderError(f"{here} can be written by other users: choose a folder only you can write")


def _existing_folder(path):
    """lstat of `path` (resolved) when it exists, after _check_chain; None
    when it does not exist."""
    _check_chain(path)
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def make_private_dir(path):
    """Make `path` a folder only root can enter, for files root writes and
    runs: created here, or an empty folder root owns. Returns the resolved
    path, the one to use from then on."""
    path = _resolved(path)
    info = _existing_folder(path)
    if info is None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # it appeared since we looked: not ours
            raise FolderError(f"{path} appeared while hpnlab was creating it") from None
        info = _existing_folder(path)
    elif os.listdir(path):
        raise FolderError(f"{path} is not empty: hpnlab needs a new or empty folder for a run's files")
    if info.st_uid != os.geteuid():
        # another user's folder stays theirs to enter, whatever its mode
        raise FolderError(
            f"{path} belongs to uid {info.st_uid}: a run's files need a folder "
            "root owns (give a new path; hpnlab creates it)"
        )
    os.chmod(path, 0o700, follow_symlinks=False)
    return path


def new_private_dir(base, prefix):
    """A new folder only root can enter under `base`, with an unpredictable
    name starting with `prefix` (mkdtemp)."""
    return tempfile.mkdtemp(prefix=prefix + "-", dir=base)


def prepare_report_dir(path, force=False):
    """Make `path` ready for a new report: created, or an empty folder of
    ours; with `force`, one holding only an earlier hpnlab report, which is
    removed. Returns the resolved path, the one to use from then on."""
    path = _resolved(path)
    if _existing_folder(path) is None:
        os.makedirs(path, exist_ok=True)
        _existing_folder(path)  # what was created on the way is ours
        return path
    entries = sorted(os.listdir(path))
    if not entries:
        return path
    if not force:
        raise FolderError(
            f"{path} is not empty (an earlier report?): choose a new folder, "
            "or pass --force to replace the report in it"
        )
    strangers = [e for e in entries if not any(fnmatch.fnmatch(e, n) for n in REPORT_NAMES)]
    if strangers:
        raise FolderError(
            f"{path} holds {strangers[0]!r}, which hpnlab did not write: "
            "--force replaces only an earlier report; choose another folder"
        )
    for entry in entries:
        full = os.path.join(path, entry)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.unlink(full)
    return path


def write_private(path, text):
    """Create file `path` (mode 0600) holding `text`; refuses to follow a
    symbolic link or to reuse a file that is there already."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)

"""Folders and files that root writes, made so that nobody else can steer them.

hpnlab runs as root and writes where its users point it (`--out`,
`--run-dir`), often in shared places such as /tmp. A folder someone else
made, or one they can write into, lets them plant a symbolic link that
makes root overwrite another file, or swap a file between its writing and
its use. So:
- a run folder (host scripts, sockets, the controller's files, logs) is
  new or empty, ours, and only root may enter it (0700);
- a report folder is new or empty, ours, and writable by us alone; with
  `force`, an earlier report in it is removed first, and only when it holds
  nothing but what hpnlab writes, so that no earlier run's files are ever
  read as this run's;
- a file is created, never opened through a symbolic link or over an
  existing file (O_EXCL | O_NOFOLLOW).
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
REPORT_NAMES = ("results.json", "summary.md", "*.png", "capture-*.pcap", "run",
                "calibration-ring.yaml", ".tmp-*")


def _owners():
    """Who may own a folder root writes in: root, and the user who ran sudo."""
    owners = {os.geteuid()}
    sudo_uid = os.environ.get("SUDO_UID", "")
    if sudo_uid.isdigit():
        owners.add(int(sudo_uid))
    return owners


def _existing_folder(path):
    """lstat of `path` when it is a real folder of ours that others cannot
    write in; None when it does not exist; FolderError otherwise."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        raise FolderError(f"{path} is a symbolic link: give the folder itself")
    if not stat.S_ISDIR(info.st_mode):
        raise FolderError(f"{path} exists and is not a folder")
    if info.st_uid not in _owners():
        raise FolderError(f"{path} belongs to uid {info.st_uid}, not to you: choose a folder of your own")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise FolderError(f"{path} can be written by other users: choose a folder only you can write")
    return info


def make_private_dir(path):
    """Make `path` a folder only root can enter, for files root writes and
    runs: created here, or an empty folder of ours. Returns `path`."""
    if _existing_folder(path) is None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:   # it appeared since we looked: not ours
            raise FolderError(f"{path} appeared while hpnlab was creating it") from None
        _existing_folder(path)
    elif os.listdir(path):
        raise FolderError(f"{path} is not empty: hpnlab needs a new or empty folder for a run's files")
    os.chmod(path, 0o700, follow_symlinks=False)
    return path


def new_private_dir(base, prefix):
    """A new folder only root can enter under `base`, with an unpredictable
    name starting with `prefix` (mkdtemp)."""
    return tempfile.mkdtemp(prefix=prefix + "-", dir=base)


def prepare_report_dir(path, force=False):
    """Make `path` ready for a new report: created, or an empty folder of
    ours; with `force`, one holding only an earlier hpnlab report, which is
    removed. Returns `path`."""
    if _existing_folder(path) is None:
        os.makedirs(path, exist_ok=True)
        _existing_folder(path)
        return path
    entries = sorted(os.listdir(path))
    if not entries:
        return path
    if not force:
        raise FolderError(f"{path} is not empty (an earlier report?): choose a new folder, "
                          "or pass --force to replace the report in it")
    strangers = [e for e in entries if not any(fnmatch.fnmatch(e, n) for n in REPORT_NAMES)]
    if strangers:
        raise FolderError(f"{path} holds {strangers[0]!r}, which hpnlab did not write: "
                          "--force replaces only an earlier report; choose another folder")
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

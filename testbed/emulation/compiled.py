"""Objects hpnlab compiles from its own C sources (the BPF queue engine,
Open vSwitch's pacer, the traffic agents' frame library): one file per version of a
source, built once.

Standard library only: scripts/provision.sh builds the pacer before the
virtualenv exists.
"""

import hashlib
import os
import shutil
import subprocess

LIBRARY_DIR = "/var/lib/hpnlab/lib"  # the shared libraries root loads


def versioned_path(source, out_dir, prefix, suffix):
    """Where the build of this version of `source` goes: its name carries
    a digest of the source, so an edited source is built anew."""
    with open(source, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()[:16]
    return os.path.join(out_dir, f"{prefix}{digest}{suffix}")


def roots_alone(path):
    """True when `path` and its folder exist, are root's, and nobody else
    may write to them."""
    try:
        stats = [os.stat(path), os.stat(os.path.dirname(path))]
    except OSError:
        return False
    return all(st.st_uid == 0 and not st.st_mode & 0o022 for st in stats)


def compile_to(path, source, argv_for, error=RuntimeError):
    """Compile `source` with the command `argv_for(tmp)` and move its
    output into place at `path` in one step (a reader never sees half a
    file); `error` with the compiler's last words when it fails."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = path + f".{os.getpid()}.tmp"
    r = subprocess.run(argv_for(tmp), capture_output=True, text=True)
    if r.returncode != 0:
        raise error(f"compiling {source} failed: {r.stderr.strip()[-400:]}")
    os.replace(tmp, path)
    return path


def compiler():
    """The C compiler that builds hpnlab's libraries, or None."""
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def shared_library(source, prefix, libs=(), out_dir=LIBRARY_DIR):
    """The shared library built from `source`, once per version of it;
    None when no C compiler is there. A file someone other than root could
    have written is built anew: root loads it. RuntimeError when it does
    not compile."""
    lib = versioned_path(source, out_dir, prefix, ".so")
    if roots_alone(lib):
        return lib
    cc = compiler()
    if cc is None:
        return None
    return compile_to(
        lib, source, lambda out: [cc, "-O2", "-Wall", "-shared", "-fPIC", "-o", out, source, *libs]
    )

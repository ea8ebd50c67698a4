"""What must not travel in an image, and the cleaning that takes it out: used by the image build and by
each output that writes a disk of its own (kiln/image/build.py, kiln/image/outputs.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from kiln.image.chroot import BUILD_PROXY, POLICY_RC

CLEAN_GLOBS = ("etc/ssh/ssh_host_*", "var/lib/dbus/machine-id", "var/lib/systemd/random-seed",
               "var/lib/systemd/credential.secret", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb",
               "var/cache/apt/archives/partial/*", "var/lib/apt/lists/*_*", "var/lib/apt/lists/partial/*",
               "var/cache/debconf/*-old", "var/cache/dnf/*", "var/cache/ldconfig/aux-cache", "root/.bash_history",
               "root/.cache", "tmp/*", "var/tmp/*", POLICY_RC, BUILD_PROXY, "etc/resolv.conf",
               # secrets: a package's own munge key, and any Slurm database password file
               "etc/munge/munge.key", "etc/slurm/slurmdbd.conf", "etc/slurm-llnl/slurmdbd.conf")
SECRET_FILES = ("etc/munge/munge.key", "etc/slurm/slurmdbd.conf", "etc/slurm-llnl/slurmdbd.conf")


class ImageBuildError(RuntimeError):
    pass


def clean(root: Path) -> None:
    """Remove what must not travel in an image (CLEAN_GLOBS), empty the logs, blank the machine-id."""
    for pattern in CLEAN_GLOBS:
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    for log in (root / "var" / "log").rglob("*"):
        if log.is_file() and not log.is_symlink():
            log.unlink()
    (root / "etc" / "machine-id").write_text("")  # systemd makes one at first boot
    left = [p for p in SECRET_FILES if (root / p).exists()]
    if left:
        raise ImageBuildError(f"refusing to finish the image: secret file(s) {', '.join(left)} still in it")

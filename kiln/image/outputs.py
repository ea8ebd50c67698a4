"""Outputs of a built image beyond its tree (``rootfs/``, what the testbed boots).

``tar``: ``image.tar.zst``, the tree with numeric owners, modes, xattrs and ACLs (file capabilities
survive), for diskless and PXE provisioning systems that unpack a root file system.
"""

from __future__ import annotations

import subprocess

from kiln.image.store import OUTPUTS, StoredImage


class OutputError(RuntimeError):
    pass


def write_tar(image: StoredImage) -> None:
    target = image.path / OUTPUTS["tar"]
    tmp = target.with_name(target.name + ".tmp")
    tar = subprocess.Popen(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls", "-C",
                            str(image.rootfs), "-cf", "-", "."], stdout=subprocess.PIPE)
    zstd = subprocess.run(["zstd", "-q", "-T0", "-3", "-f", "-o", str(tmp)], stdin=tar.stdout, capture_output=True)
    tar.stdout.close()
    if tar.wait() != 0 or zstd.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{image.name}: tar.zst failed: {zstd.stderr.decode(errors='replace').strip()[-300:]}")
    tmp.rename(target)

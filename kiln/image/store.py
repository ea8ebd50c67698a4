"""The image store: one directory per image under /var/cache/kiln/images (``KILN_IMAGE_STORE``).

    NAME/rootfs/          the image's tree (what the testbed boots)
    NAME/manifest.json    what is in it (kiln/image/manifest.py)
    NAME/image.tar.zst    the tree as a tar, for diskless and PXE provisioning systems (--format tar)
    NAME/image.qcow2      a bootable disk, with vmlinuz and initrd.img beside it (--format qcow2)
    NAME/image.box        a Vagrant box (libvirt provider) of the same disk (--format vagrant-box)

NAME is ``CLUSTER-TARGET-HASH``, the hash of the image's recipe (kiln/image/recipe.py). A build
writes NAME.tmp and renames it into place when complete, so a store never holds half an image.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

STORE = Path(os.environ.get("KILN_IMAGE_STORE", "/var/cache/kiln/images"))
OUTPUTS = {"dir": "rootfs", "tar": "image.tar.zst", "qcow2": "image.qcow2", "vagrant-box": "image.box"}
# The qcow2 output's own version (qcow2.json): a disk written by an older kiln is written again.
# 2: the seed unit (kiln-seed.service) and 1 GiB of free room; 3: seed before tmpfiles; 4: host keys
# on the console; 5: the disk's manifest lists the units the disk added.
QCOW2_VERSION = 5
# The vagrant-box output's (box.json): 2: root is Vagrant's user; the disk at QCOW2_VERSION.
BOX_VERSION = f"2.{QCOW2_VERSION}"
OUTPUT_VERSIONS = {"qcow2": ("qcow2.json", QCOW2_VERSION), "vagrant-box": ("box.json", BOX_VERSION)}


class ImageNotFound(LookupError):
    pass


@dataclass(frozen=True)
class StoredImage:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    @property
    def manifest(self) -> dict:
        return json.loads((self.path / "manifest.json").read_text())

    @property
    def formats(self) -> list[str]:
        return [f for f, p in OUTPUTS.items() if (self.path / p).exists() and self.current(f)]

    def current(self, fmt: str) -> bool:
        """False for an output an older kiln wrote (its version file says another version)."""
        if fmt not in OUTPUT_VERSIONS:
            return True
        name, version = OUTPUT_VERSIONS[fmt]
        try:
            return json.loads((self.path / name).read_text()).get("version") == version
        except (OSError, ValueError):
            return False

    def size(self, fmt: str) -> int:
        path = self.path / OUTPUTS[fmt]
        if path.is_file():
            return path.stat().st_size
        return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def images(store: Path | None = None) -> list[StoredImage]:
    root = store or STORE
    if not root.is_dir():
        return []
    return sorted((StoredImage(p) for p in root.iterdir()
                   if p.is_dir() and not p.name.endswith(".tmp") and (p / "manifest.json").is_file()),
                  key=lambda i: i.manifest.get("built", ""))


def find(name: str, store: Path | None = None) -> StoredImage:
    """The image called ``name``, or the newest whose name starts with ``name`` (``kiln-testbed_compute``)."""
    found = [i for i in images(store) if i.name == name] or [i for i in images(store) if i.name.startswith(name)]
    if not found:
        have = ", ".join(i.name for i in images(store)) or "none (kiln image build makes one)"
        raise ImageNotFound(f"no image {name!r} in {store or STORE}; there are: {have}")
    return found[-1]


class ImageInUse(RuntimeError):
    pass


def users(image: StoredImage) -> list[str]:
    """Mount points whose overlay reads this image's tree (testbed nodes booted from it)."""
    lower = f"lowerdir={image.rootfs}"
    with open("/proc/self/mounts") as mounts:
        return [line.split()[1] for line in mounts
                if line.split()[2:3] == ["overlay"] and any(o == lower or o.startswith(lower + ":")
                                                             for o in line.split()[3].split(","))]


def remove(image: StoredImage) -> None:
    """Remove ``image``; refused while a testbed node runs on it (its overlay would break under it)."""
    used = users(image)
    if used:
        raise ImageInUse(f"{image.name} is in use by {len(used)} testbed node(s) ({used[0]}...): "
                         "kiln testbed down first")
    shutil.rmtree(image.path)


def prunable(found: list[StoredImage], keep: int, kept: set[str]) -> list[StoredImage]:
    """The images ``kiln image prune`` removes: all but the ``keep`` newest of each cluster, target and
    OS, never one named in ``kept`` (a testbed's recorded nodes boot from it). ``found`` oldest first,
    as ``images`` gives it."""
    groups: dict[tuple, list[StoredImage]] = {}
    for image in found:
        m = image.manifest
        groups.setdefault((m.get("cluster"), m.get("target"), m.get("os")), []).append(image)
    old = [i for group in groups.values() for i in group[:max(0, len(group) - keep)]]
    return [i for i in found if i in old and i.name not in kept]


def stale_builds(store: Path | None = None) -> list[Path]:
    root = store or STORE
    return sorted(root.glob("*.tmp")) if root.is_dir() else []

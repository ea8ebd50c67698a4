"""The inventory's node-local encrypted volumes (``kiln_encrypted_volumes``; roles/disk_encryption.py): a
scratch or checkpoint disk of a node as LUKS2, unlocked at boot by network-bound disk encryption (clevis on
the node, tang on the cluster's controllers), documented once here as the rest in kiln/inventory/schema.py."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from kiln.inventory.formats import MountOptions, MountPoint, _text
from kiln.inventory.strict import Strict as _Strict

# A block device by a path under /dev: a stable name (/dev/disk/by-id/..., by-path, by-partlabel) or a kernel
# name (/dev/nvme1n1, /dev/sdb). No '..', no spaces, nothing a shell or crypttab reads as syntax.
DEVICE = re.compile(r"^/dev/(?:[A-Za-z0-9_+:.=-]{1,128}/){0,3}[A-Za-z0-9_+:.=-]{1,128}$", re.ASCII)
Device = _text("block device", DEVICE, "a path under /dev such as /dev/disk/by-id/nvme-SAMSUNG_X or /dev/nvme1n1 "
               "(letters, digits and _ + : . = -, no '..')")
# The name of the opened volume, /dev/mapper/NAME (and systemd's systemd-cryptsetup@NAME.service)
MAPPER_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$", re.ASCII)
MapperName = _text("volume name", MAPPER_NAME, "a lower-case letter first, then lower-case letters, digits and "
                   "'_' (at most 32), e.g. scratch")


class EncryptedVolume(_Strict):
    """A node-local disk kiln keeps encrypted (LUKS2) and mounted: made on a blank device by the first deploy,
    unlocked at every boot by clevis from the cluster's tang servers (the controllers) with no person, and
    left locked (the node drained by its check, STORAGE_LOCKED) while no tang server answers."""

    name: MapperName = Field(description="the opened volume's name: /dev/mapper/NAME")
    device: Device = Field(description="the block device; kiln formats it only when it is blank (no "
                           "signature blkid knows) and refuses one that holds anything but LUKS")
    path: MountPoint = Field(description="where its filesystem is mounted, e.g. /scratch")
    filesystem: Literal["ext4", "xfs"] = Field("ext4", description="the filesystem made in it on its first deploy")
    options: MountOptions = Field("noatime", description="mount options, comma separated, no spaces")

    @field_validator("device")
    @classmethod
    def _no_parent(cls, device: str) -> str:
        if "/../" in device + "/" or "/./" in device + "/":
            raise ValueError(f"{device!r}: no '.' or '..' parts in a device path")
        return device

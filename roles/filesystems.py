"""The parallel filesystems' clients, for the storage role: what each needs beyond an /etc/fstab line.

Defaults, in one place:

+ Lustre (``kiln_lustre``, ``lustre`` pin): the client packages at the pin, held, from ``repository``
  when given: ``dkms`` (built on the node: Debian/Ubuntu ``lustre-client-modules-dkms``, Rocky
  ``lustre-client-dkms``) or ``kmod`` (prebuilt: Rocky ``kmod-lustre-client``, Debian/Ubuntu
  ``lustre-client-modules-<kernel pin>``), default dkms on Debian/Ubuntu and kmod on Rocky; with
  ``lustre-client`` / ``lustre-client-utils``. LNet from ``lnet_networks`` in /etc/modprobe.d/lustre.conf
  (``options lnet networks="o2ib0(ib0)"``), read when the modules load (a change applies at the next
  reboot or remount of every Lustre filesystem). Mounted through /etc/fstab (``MGS@net:/fsname``).
+ BeeGFS (``kiln_beegfs``, ``beegfs`` pin): ``beegfs-client``, ``beegfs-utils`` and, before BeeGFS 8,
  ``beegfs-helperd``, held; ``sysMgmtdHost`` and ``connAuthFile`` (the secrets directory's
  ``beegfs-connauth``, copied to /etc/beegfs/connauthfile, 0400) set in beegfs-client.conf (and
  beegfs-helperd.conf); /etc/beegfs/beegfs-mounts.conf lists the mounts (no fstab line: the
  ``beegfs-client`` service mounts them, restarted when its files change).
+ CephFS (``kiln_ceph``): ``ceph-fuse`` (or ``ceph-common`` for the kernel client), /etc/ceph/ceph.conf
  (``mon_host``, ``fsid``), the client's keyring from the secrets directory (0600). fstab: ``none PATH
  fuse.ceph ceph.id=NAME,ceph.client_mountpoint=DIR`` (fuse) or ``SOURCE PATH ceph name=NAME`` (kernel).
+ Weka: mounted through fstab as ``wekafs`` (the client comes from the Weka cluster's own installer).
+ GPFS: nothing written: mmmount mounts it; kiln checks it.
+ Nothing kernel-side in a container: files are written, modules and client services are not started.
"""

from __future__ import annotations

from pyinfra.operations import server

from kiln.secrets import BEEGFS_CONNAUTH, ceph_keyring
from roles.context import NodeContext, when_changed
from roles.secret_files import BEEGFS_CONNAUTH_FILE
from roles.operations import line_present, managed_directory, pinned_packages, service_running
from roles.repositories import vendor_repository

BEEGFS_CLIENT_CONF = "/etc/beegfs/beegfs-client.conf"
BEEGFS_HELPERD_CONF = "/etc/beegfs/beegfs-helperd.conf"
BEEGFS_MOUNTS = "/etc/beegfs/beegfs-mounts.conf"
LUSTRE_CONF = "/etc/modprobe.d/lustre.conf"


def types(ctx: NodeContext) -> set[str]:
    return {m.type for m in ctx.node.storage_mounts}


# --- Lustre ----------------------------------------------------------------------------------------------

def lustre_modules(ctx: NodeContext) -> str:
    chosen = ctx.cluster.setting("lustre").modules
    return chosen or ("kmod" if ctx.platform.family == "redhat" else "dkms")


def lustre_packages(ctx: NodeContext) -> dict[str, str]:
    pin, modules = ctx.cluster.versions["lustre"], lustre_modules(ctx)
    if ctx.platform.family == "redhat":
        kernel_part = "kmod-lustre-client" if modules == "kmod" else "lustre-client-dkms"
        return {kernel_part: pin, "lustre-client": pin}
    kernel_part = "lustre-client-modules-dkms" if modules == "dkms" else \
        f"lustre-client-modules-{ctx.cluster.versions['kernel']}"
    return {kernel_part: pin, "lustre-client-utils": pin}


def lustre_conf(lustre) -> str:
    return (f"# Written by kiln from kiln_lustre.lnet_networks: read when the lnet module loads\n"
            f"options lnet networks=\"{','.join(lustre.lnet_networks)}\"\n")


def install_lustre(ctx: NodeContext) -> None:
    vendor_repository(ctx, "lustre", ctx.cluster.setting("lustre").repository)
    pinned_packages(name=f"storage: Lustre client {ctx.cluster.versions['lustre']} ({lustre_modules(ctx)}), held",
                    ctx=ctx, packages=lustre_packages(ctx))


def configure_lustre(ctx: NodeContext) -> None:
    ctx.put(LUSTRE_CONF, lustre_conf(ctx.cluster.setting("lustre")), mode="644", name="storage: LNet networks")


# --- BeeGFS ----------------------------------------------------------------------------------------------

def beegfs_packages(pin: str) -> dict[str, str]:
    packages = {"beegfs-client": pin, "beegfs-utils": pin}
    if not pin.startswith("8"):
        packages["beegfs-helperd"] = pin  # BeeGFS 8 has no helper daemon
    return packages


def install_beegfs(ctx: NodeContext) -> None:
    beegfs, pin = ctx.cluster.setting("beegfs"), ctx.cluster.versions["beegfs"]
    vendor_repository(ctx, "beegfs", beegfs.repository)
    pinned_packages(name=f"storage: BeeGFS client {pin}, held", ctx=ctx, packages=beegfs_packages(pin))


def _conf_setting(ctx: NodeContext, path: str, key: str, value: str):
    index = ctx.watch_line(path, rf"^{key}\s*=\s*{value}\s*$")
    return line_present(name=f"storage: {key} in {path}", ctx=ctx, path=path, line=f"{key} = {value}",
                        index=index, replace_regex=rf"^\s*{key}\s*=")


def configure_beegfs(ctx: NodeContext) -> None:
    beegfs, pin = ctx.cluster.setting("beegfs"), ctx.cluster.versions["beegfs"]
    confs = [BEEGFS_CLIENT_CONF] + ([] if pin.startswith("8") else [BEEGFS_HELPERD_CONF])
    changed = [_conf_setting(ctx, BEEGFS_CLIENT_CONF, "sysMgmtdHost", beegfs.management_host)]
    if beegfs.connauth:
        changed.append(ctx.put(BEEGFS_CONNAUTH_FILE, ctx.secrets.site[BEEGFS_CONNAUTH], mode="400", secret=True,
                               name="storage: BeeGFS connAuthFile"))
        changed += [_conf_setting(ctx, conf, "connAuthFile", BEEGFS_CONNAUTH_FILE) for conf in confs]
    else:
        changed += [_conf_setting(ctx, conf, "connDisableAuthentication", "true") for conf in confs]
    mounts = "".join(f"{m.path} {BEEGFS_CLIENT_CONF}\n" for m in ctx.node.storage_mounts if m.type == "beegfs")
    changed.append(ctx.put(BEEGFS_MOUNTS, "# Written by kiln from kiln_storage_mounts\n" + mounts, mode="644",
                           name="storage: BeeGFS mounts"))
    if ctx.in_container:
        return  # the client is a kernel module
    services = ([] if pin.startswith("8") else ["beegfs-helperd"]) + ["beegfs-client"]
    for service in services:
        unit = ctx.watch_unit(service)
        server.shell(name=f"storage: restart {service} (if its files changed)", commands=[f"systemctl restart {unit}"],
                     _if=lambda u=unit: ctx.snapshot.unit(u).active == "active" and when_changed(*changed)())
        service_running(name=f"storage: {service} enabled and running", ctx=ctx, unit=unit)


# --- CephFS ----------------------------------------------------------------------------------------------

def ceph_package(ctx: NodeContext) -> str:
    return "ceph-fuse" if ctx.cluster.setting("ceph").client == "fuse" else "ceph-common"


def ceph_conf(ceph) -> str:
    lines = ["# Written by kiln from kiln_ceph", "[global]", f"mon_host = {','.join(ceph.monitors)}"]
    if ceph.fsid:
        lines.append(f"fsid = {ceph.fsid}")
    return "\n".join(lines) + "\n"


def configure_ceph(ctx: NodeContext) -> None:
    ceph = ctx.cluster.setting("ceph")
    ctx.watch_path("/etc/ceph")
    managed_directory(name="storage: /etc/ceph", ctx=ctx, path="/etc/ceph", user="root", group="root", mode="755")
    ctx.put("/etc/ceph/ceph.conf", ceph_conf(ceph), mode="644", name="storage: ceph.conf")
    keyring = ceph_keyring(ceph.client_name)
    ctx.put(f"/etc/ceph/{keyring}", ctx.secrets.site[keyring], mode="600", secret=True,
            name=f"storage: CephX keyring of client.{ceph.client_name}")


def ceph_fstab_fields(ctx: NodeContext, mount) -> tuple[str, str, list[str]]:
    """(source, fstype, extra options) of a cephfs mount's fstab line."""
    ceph = ctx.cluster.setting("ceph")
    if ceph.client == "fuse":
        directory = mount.source.partition(":")[2] or "/"
        return "none", "fuse.ceph", [f"ceph.id={ceph.client_name}", f"ceph.client_mountpoint={directory}"]
    return mount.source, "ceph", [f"name={ceph.client_name}"]


def install(ctx: NodeContext) -> None:
    if "lustre" in types(ctx):
        install_lustre(ctx)
    if "beegfs" in types(ctx):
        install_beegfs(ctx)


def configure(ctx: NodeContext) -> None:
    if "lustre" in types(ctx):
        configure_lustre(ctx)
    if "beegfs" in types(ctx):
        configure_beegfs(ctx)
    if "cephfs" in types(ctx):
        configure_ceph(ctx)

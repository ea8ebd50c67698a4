"""kiln's own pyinfra operations: read facts, compare, yield only the commands that close the gap."""

from __future__ import annotations

import functools
import io
import posixpath
from hashlib import sha1
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, StringCommand, operation
from pyinfra.operations import files, server

from kiln.shell import quote, quote_all
from roles.snapshot import NodeSnapshotFact, Watched


def changed_any(*ops: Any) -> bool:
    """True when one of ``ops`` changed the node: after they ran, from their results; in a dry run
    (before anything ran), from whether they would change it."""
    return any(op.did_change() if op.is_complete() else bool(op._maybe_is_change) for op in ops)


def when_changed(*ops: Any):
    """An ``_if=`` condition: run this operation only if one of ``ops`` changed the node."""
    return lambda: changed_any(*ops)


# A node that lost power during a package install is left with dpkg interrupted (apt then refuses to
# install anything until ``dpkg --configure -a``): finish that first, keeping the local conffiles. Power
# lost while a package was being unpacked leaves it half-installed with "reinstall required", which
# ``--configure`` refuses ("package is in a very bad inconsistent state"): those are reinstalled from
# apt's lists, then the configure runs again and must succeed.
DPKG_REPAIR = ('if [ -n "$(ls -A /var/lib/dpkg/updates 2>/dev/null)" ] || [ -n "$(dpkg --audit 2>/dev/null)" ]; then '
               "export DEBIAN_FRONTEND=noninteractive; "
               "dpkg --configure -a --force-confdef --force-confold >/dev/null 2>&1 || true; "
               "broken=$(dpkg-query -W -f='${db:Status-Abbrev}|${Package}\\n' 2>/dev/null "
               "| awk -F'|' 'substr($1,2,1)==\"H\" || substr($1,3,1)==\"R\" {print $2}'); "
               'if [ -n "$broken" ]; then apt-get install -y -q --reinstall '
               "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold $broken; fi; "
               "dpkg --configure -a --force-confdef --force-confold; fi")
APT_INSTALL = ("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --allow-downgrades "
               "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold")


def _snapshot(ctx):
    """The node's snapshot, taken now if none covers everything registered so far: ``kiln deploy``
    takes it once after preparing; under the plain ``pyinfra`` command the first operation takes it."""
    snap = ctx.snapshot
    if snap is None or not snap.covers(Watched.of(ctx)):
        snap = ctx.snapshot = take_snapshot(ctx)
    return snap


def take_snapshot(ctx):
    watched = Watched.of(ctx)
    snap = host.get_fact(NodeSnapshotFact, watched=watched)
    snap.asked = watched
    return snap


def watching(register):
    """Wrap an operation so that, when a role calls it, ``register(**its keyword arguments)`` names what its
    body will read from the snapshot (packages, accounts): the body runs after the snapshot is taken."""
    def wrap(op):
        @functools.wraps(op)
        def call(*args, **kwargs):
            register(**kwargs)
            return op(*args, **kwargs)
        return call
    return wrap


def _watch_packages(ctx, packages=None, urls=None, **_):
    ctx.watch_packages(list(packages or urls or ()))
    if not ctx.platform.uses_apt and packages:
        ctx.watch_packages(["python3-dnf-plugin-versionlock"])


def _watch_accounts(ctx, groups=(), users=(), **_):
    ctx.watch_accounts(users=[u["name"] for u in users],
                       groups=[g[0] for g in groups] + [g for u in users for g in [u["group"], *(u.get("groups") or [])]])


def kernel_guard(apt: bool, specs: str, kernel_pin: str) -> str:
    """A command that fails, before anything is installed, when installing ``specs`` would install or
    upgrade a kernel other than ``kernel_pin`` ("" allows none): the package manager's own dry run
    (``apt-get install -s``, ``dnf install --assumeno``) says what it would do."""
    if apt:
        simulate = f"apt-get install -s -q --no-install-recommends --allow-downgrades --allow-change-held-packages {specs}"
        kernels = "sed -n 's/^Inst \\(linux-image-[^ ]*\\).*/\\1/p'"
        allowed = f" | grep -vx {quote('linux-image-' + kernel_pin)}" if kernel_pin else ""
        check_exit = "|| { printf '%s\\n' \"$kiln_sim\" | tail -n 5 >&2; exit 1; }"
    else:
        simulate = f"dnf -q install --assumeno --disableplugin=versionlock {specs}"
        kernels = "awk '$1 ~ /^kernel(-core|-modules(-core)?)?$/ {print $1\"-\"$3}'"
        allowed = f" | grep -vF {quote(kernel_pin.rsplit('.', 1)[0])}" if kernel_pin else ""
        check_exit = "|| true"
    return (f"kiln_sim=$({simulate} 2>&1) {check_exit}; "
            f"kiln_k=$(printf '%s\\n' \"$kiln_sim\" | {kernels}{allowed} | tr '\\n' ' '); "
            "[ -z \"$kiln_k\" ] || { echo \"kernel guard: installing these packages would install or upgrade "
            "kernel package(s) $kiln_k, which kiln_versions.kernel does not pin. Nothing was installed. Pin that "
            "kernel in versions.yml (and reboot into it), or find what pulls it in with the package manager's "
            "dry run.\" >&2; exit 1; }")


@watching(_watch_packages)
@operation()
def pinned_packages(ctx, packages: dict[str, str | None], sources: dict[str, str] | None = None,
                    guard_kernel: str | None = None):
    """
    Install packages, each at its exact version when one is given, and hold the versioned ones.

    + ctx: the node's NodeContext (its platform picks apt or dnf; its snapshot is compared)
    + packages: name -> exact version (``22.05.8-4+deb12u3``), or None for "any version, not held"
    + sources: name -> what to hand the package manager instead of the name (a release RPM's URL)
    + guard_kernel: when given (the kernel pin, "" for none), fail before installing if the install
      would bring in any other kernel (see ``kernel_guard``)

    A held package that must move to a new pin is unheld, installed at the pin and held again, so a
    plain ``apt-get upgrade`` never moves it and only a changed pin does. The package index is
    refreshed only when something must be installed. On Rocky, holds are ``dnf versionlock``.

    .. code:: python

        pinned_packages(ctx=ctx, packages={"slurmd": "22.05.8-4+deb12u3", "munge": None})
    """
    snap, apt = _snapshot(ctx), ctx.platform.uses_apt
    installed, held = snap.packages, snap.held
    missing = [name for name, version in packages.items()
               if name not in installed or (version and installed[name] != version)]
    pinned = [name for name, version in packages.items() if version]
    if not apt and pinned and "python3-dnf-plugin-versionlock" not in installed:
        missing.insert(0, "python3-dnf-plugin-versionlock")
    sources = sources or {}
    spec = (lambda n: f"{n}={packages[n]}" if packages.get(n) else sources.get(n, n)) if apt else \
        (lambda n: f"{n}-{packages[n]}" if packages.get(n) else sources.get(n, n))
    unhold = sorted(set(missing) & held)
    if missing:
        specs = " ".join(quote(spec(n)) for n in missing)
        if apt:
            yield DPKG_REPAIR
            yield "apt-get update -q"
        if guard_kernel is not None:
            yield kernel_guard(apt, specs, guard_kernel)
        if unhold:
            yield ("apt-mark unhold " if apt else "dnf -q versionlock delete ") + quote_all(unhold)
        yield f"{APT_INSTALL} {specs}" if apt else f"dnf install -y -q {specs}"
    hold = sorted(n for n in pinned if n not in held or n in unhold)
    if hold:
        if apt:
            yield "apt-mark hold " + quote_all(hold)
        else:
            yield "dnf -q versionlock add " + " ".join(quote(spec(n)) for n in hold)


@operation()
def managed_file(ctx, path: str, content: bytes, mode: str, user: str, group: str):
    """
    A whole file with exact content, owner, group and mode (no templating here: roles render).

    + ctx: the node's NodeContext
    + path: absolute path on the node; its directory must exist
    + content: the bytes the file must hold
    + mode, user, group: e.g. ``"644"``, ``"root"``, ``"root"``
    """
    current = _snapshot(ctx).files.get(path)
    if current is None or current.kind != "regular file" or current.sha1 != sha1(content).hexdigest():
        yield from files.put._inner(src=io.BytesIO(content), dest=path, user=user, group=group, mode=mode,
                                    create_remote_dir=False, force=True)
        return
    if (current.user, current.group) != (user, group):
        yield f"chown {quote(user + ':' + group)} {quote(path)}"
    if current.mode != mode.lstrip("0"):
        yield f"chmod {quote(mode)} {quote(path)}"


def _owner_and_mode_fixes(ctx, path: str, content: bytes, mode: str, user: str, group: str) -> list[str] | None:
    """The commands that give ``path`` its owner and mode when it already holds ``content``; None when
    its content differs (or it is no regular file) and it must be written."""
    current = _snapshot(ctx).files.get(path)
    if current is None or current.kind != "regular file" or current.sha1 != sha1(content).hexdigest():
        return None
    fixes = []
    if (current.user, current.group) != (user, group):
        fixes.append(f"chown {quote(user + ':' + group)} {quote(path)}")
    if current.mode != mode.lstrip("0"):
        fixes.append(f"chmod {quote(mode)} {quote(path)}")
    return fixes


@operation()
def validated_file(ctx, path: str, content: bytes, mode: str, user: str, group: str, check: str):
    """
    A whole file that is installed only once ``check`` accepts it (Prometheus' ``promtool check
    config``, Alertmanager's ``amtool check-config``): a file the daemon would refuse never replaces
    the one it runs with.

    + ctx: the node's NodeContext
    + path: absolute path on the node; its directory must exist
    + content: the bytes the file must hold
    + mode, user, group: e.g. ``"640"``, ``"root"``, ``"prometheus"``
    + check: a command with ``{}`` where the candidate's path goes (kiln quotes it)

    The bytes go to ``<path>.kiln-new`` with the final owner and mode; the check reads that copy; only
    then is it renamed over ``path``. A refused file is removed and the host fails with the check's
    own message.
    """
    fixes = _owner_and_mode_fixes(ctx, path, content, mode, user, group)
    if fixes is not None:
        yield from fixes
        return
    stage = f"{path}.kiln-new"
    yield from files.put._inner(src=io.BytesIO(content), dest=stage, user=user, group=group, mode=mode,
                                create_remote_dir=False, force=True)
    refused = quote(f"kiln: {path} was not installed: {check.split(' ')[0]} refused it (above); the file in use is kept")
    yield f"{check.replace('{}', quote(stage))} >&2 || {{ rm -f {quote(stage)}; echo {refused} >&2; exit 1; }}"
    yield f"mv -f {quote(stage)} {quote(path)}"


@operation()
def secret_file(ctx, path: str, content: bytes, mode: str, user: str, group: str):
    """
    A secret file (munge key, slurmdbd.conf) that never exists on the node with a wider mode or
    another owner than its final ones, not for an instant, and is never staged in /tmp.

    + ctx: the node's NodeContext
    + path: absolute path on the node; its directory must exist
    + content: the bytes the file must hold
    + mode, user, group: the final mode and owner, e.g. ``"400"``, ``"munge"``, ``"munge"``

    The bytes go into ``<path>.kiln-new``, created empty at 0600 root first (an upload into an
    existing file keeps its mode), which then gets its owner and mode and is renamed over ``path`` in
    one step. Under ``become`` the upload's hop is a 0600 file in the login user's home directory,
    made by that user before the upload, not pyinfra's file in /tmp.
    """
    fixes = _owner_and_mode_fixes(ctx, path, content, mode, user, group)
    if fixes is not None:
        yield from fixes
        return
    stage = f"{path}.kiln-new"
    yield f"umask 077 && rm -f {quote(stage)} && : > {quote(stage)}"
    if ctx.node.connection.get("_sudo"):
        hop = f".kiln-upload-{sha1(path.encode()).hexdigest()[:12]}"
        yield StringCommand(f"umask 077 && rm -f {quote(hop)} && : > {quote(hop)}", _sudo=False)
        yield FileUploadCommand(io.BytesIO(content), stage, remote_temp_filename=hop)
    else:
        yield FileUploadCommand(io.BytesIO(content), stage)
    yield (f"chown {quote(user + ':' + group)} {quote(stage)} && chmod {quote(mode)} {quote(stage)} && "
           f"mv -f {quote(stage)} {quote(path)}")


@operation()
def path_absent(ctx, path: str):
    """
    No file at ``path`` (``ctx.watch_path`` it): one a role no longer writes there is removed.

    + ctx: the node's NodeContext
    + path: absolute path of a file
    """
    current = _snapshot(ctx).files.get(path)
    if current is None:
        return
    if current.kind == "directory":
        raise OperationError(f"{path} is a directory, where kiln expects no file: move it away")
    yield f"rm -f {quote(path)}"


@operation()
def managed_directory(ctx, path: str, mode: str, user: str, group: str, only_create: bool = False,
                      reapply_after: list = ()):
    """
    A directory with owner, group and mode.

    + ctx: the node's NodeContext
    + path: absolute path; parents are created as needed
    + mode, user, group: e.g. ``"755"``, ``"slurm"``, ``"slurm"``
    + only_create: set them only when creating it (a mount point: the mounted filesystem's root has its own)
    + reapply_after: operations of this run that may change the directory (a package's scripts): when
      one of them changed the node, owner and mode are set again, whatever the snapshot said
    """
    current = _snapshot(ctx).files.get(path)
    if current is not None and current.kind == "directory" and not only_create and changed_any(*reapply_after):
        yield f"chown {quote(user + ':' + group)} {quote(path)}"
        yield f"chmod {quote(mode)} {quote(path)}"
        return
    if current is None:
        yield f"mkdir -p {quote(path)}"
    elif current.kind != "directory":
        raise OperationError(f"{path} exists and is a {current.kind}, not a directory: move it away")
    elif only_create:
        return
    if current is None or (current.user, current.group) != (user, group):
        yield f"chown {quote(user + ':' + group)} {quote(path)}"
    if current is None or current.mode != mode.lstrip("0"):
        yield f"chmod {quote(mode)} {quote(path)}"


@operation()
def line_present(ctx, index: int, path: str, line: str, replace_regex: str | None = None):
    """
    Append ``line`` to ``path`` unless a line matching the watched regex is there.

    + ctx: the node's NodeContext
    + index: what ``ctx.watch_line(path, regex)`` returned
    + path: the file
    + line: the exact line to append
    + replace_regex: lines matching it (the same entry with other values) are removed first
    """
    if index not in _snapshot(ctx).lines:
        if replace_regex:
            yield f"sed -i -E {quote('/' + replace_regex.replace('/', chr(92) + '/') + '/d')} {quote(path)}"
        yield f"echo {quote(line)} >> {quote(path)}"


@operation()
def line_placed_before(ctx, index: int, path: str, line: str, regex: str, anchor: str):
    r"""
    Put ``line`` in ``path`` before the first line matching ``anchor`` (at the end where none does), unless
    a line matching the watched regex is there already: ``index`` comes from ``ctx.watch_line_before``, so a
    line that is present but after the anchor is taken out and put back in its place.

    + ctx: the node's NodeContext
    + index: what ``ctx.watch_line_before(path, regex, anchor)`` returned
    + path: the file
    + line: the exact line
    + regex: the watched regex: lines matching it are removed before ``line`` is put in
    + anchor: an extended regex (no ``/`` needed) of the line it must come before

    .. code:: python

        line_placed_before(ctx=ctx, index=i, path="/etc/pam.d/sshd", line="account required pam_x.so",
                           regex=r"^account\s+required\s+pam_x\.so", anchor=r"^@include\s+common-account")
    """
    if index in _snapshot(ctx).lines:
        return
    slash = chr(92) + "/"
    yield f"sed -i -E {quote('/' + regex.replace('/', slash) + '/d')} {quote(path)}"
    text = line.replace(chr(92), chr(92) * 2).replace("&", chr(92) + "&").replace("/", slash)
    at = anchor.replace("/", slash)
    yield (f"if grep -qE {quote(anchor)} {quote(path)}; then "
           f"sed -i -E {quote('0,/' + at + '/s//' + text + chr(92) + 'n&/')} {quote(path)}; "
           f"else echo {quote(line)} >> {quote(path)}; fi")


@operation()
def line_removed(ctx, index: int, command: str):
    """
    Run ``command`` (which takes a line out of a file) while the watched line is there.

    + ctx: the node's NodeContext
    + index: what ``ctx.watch_line(path, regex)`` returned
    + command: what removes or comments out the line (a distribution's own tool where it has one)
    """
    if index in _snapshot(ctx).lines:
        yield command


# systemd re-reads unit files; skipped where systemd is not running (an image chroot), whose first
# boot reads them anyway.
DAEMON_RELOAD = "if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi"


def _watch_daemons(ctx, daemons=None, **_):
    ctx.watch_packages(list(daemons or ()))
    for package, unit in (daemons or {}).items():
        ctx.watch_unit(unit)
        ctx.kept_stopped[unit] = package


@watching(_watch_daemons)
@operation()
def kept_stopped_until_configured(ctx, daemons: dict[str, str]):
    """
    Mask the units of packages about to be installed, so the packages' own start (Debian starts a daemon
    at its install, with the package's defaults) never runs them before kiln has written their
    configuration; ``service_running`` unmasks a unit when kiln starts it.

    + ctx: the node's NodeContext
    + daemons: package -> its unit; only those whose package is not installed yet are masked, and only
      in a run that configures the node too (an image build installs into a root where nothing starts)

    .. code:: python

        kept_stopped_until_configured(ctx=ctx, daemons={"prometheus": "prometheus.service"})
    """
    if not ctx.configures:
        return  # an image build: nothing starts in its root, and the image keeps the units as installed
    snap = _snapshot(ctx)
    fresh = [unit for package, unit in daemons.items()
             if package not in snap.packages and snap.unit(unit).load != "masked"]
    if fresh:
        yield "systemctl mask " + quote_all(fresh)


@operation()
def service_running(ctx, unit: str, enabled: bool = True, start=True, before: str | None = None):
    """
    A systemd unit that is active (and enabled, unless ``enabled=False``).

    + ctx: the node's NodeContext
    + unit: e.g. ``slurmd.service``
    + enabled: also enable it at boot
    + start: start it now; a callable is asked once the snapshot is read (nvidia-persistenced starts
      only where the driver's module is loaded)
    + before: a command run right before the start, only when there is one: a wait for what the
      daemon needs at its start (``answers``: slurmctld needs slurmdbd to answer)
    """
    snap = _snapshot(ctx)
    state = snap.unit(unit)
    masked_now = unit in ctx.kept_stopped and ctx.kept_stopped[unit] not in snap.packages  # masked by this run
    if (state.load == "masked" or masked_now) and (enabled or start):  # kept stopped until configured: it is now
        yield f"systemctl unmask {quote(unit)}"
    if enabled and state.enabled not in ("enabled", "static", "alias", "generated", "enabled-runtime"):
        yield f"systemctl enable {quote(unit)}"
    if callable(start):
        start = start(snap)
    if start and state.active != "active":
        if before:
            yield before
        yield f"systemctl start {quote(unit)}"


@watching(_watch_packages)
@operation()
def fetched_packages(ctx, urls: dict[str, str], version: str | None = None, marker: str | None = None):
    """
    Install package files fetched from URLs (a repository key package, a project's release packages)
    unless they are there already; with ``version``, hold them at it.

    + ctx: the node's NodeContext
    + urls: package name -> URL of its .deb or .rpm
    + version: the version they must be installed at (compared with the installed packages)
    + marker: instead of a version, a path the package provides (``ctx.watch_path`` it), e.g. a keyring
    """
    snap, apt = _snapshot(ctx), ctx.platform.uses_apt
    if marker is not None and marker in snap.files:
        return
    if version is not None and all(snap.packages.get(n) == version for n in urls):
        return
    names = sorted(urls)
    local = {n: "/var/cache/kiln-" + urls[n].rstrip("/").rsplit("/", 1)[-1] for n in names}
    if version is not None and set(names) & snap.held:
        yield ("apt-mark unhold " if apt else "dnf -q versionlock delete ") + " ".join(sorted(set(names) & snap.held))
    for n in names:
        yield f"curl -fsSL --retry 3 -o {quote(local[n])} {quote(urls[n])}"
    files_ = " ".join(quote(local[n]) for n in names)
    if apt:
        yield DPKG_REPAIR
    yield f"{APT_INSTALL} {files_}" if apt else f"dnf install -y -q {files_}"
    if version is not None:
        yield ("apt-mark hold " if apt else "dnf -q versionlock add ") + " ".join(names)


@operation()
def commands_until(ctx, marker: str, commands: list[str]):
    """
    Run ``commands`` (a build, say) unless ``marker`` exists; the commands must create it last.

    + ctx: the node's NodeContext (``marker`` must be watched: ``ctx.watch_path``)
    + marker: e.g. ``/opt/nccl-tests-2.13.11/build/all_reduce_perf``
    + commands: shell commands, run in order
    """
    if marker not in _snapshot(ctx).files:
        yield from commands


@operation()
def module_loaded(ctx, module: str, requires: str):
    """
    Load kernel module ``module`` now when module ``requires`` is loaded (both read with the snapshot:
    ``ctx.watch_module``); loading at boot is a modules-load.d file the role writes.

    + ctx: the node's NodeContext
    + module: e.g. ``nvidia_peermem``
    + requires: e.g. ``nvidia``: where it is not loaded (before the reboot a new driver needs) nothing runs
    """
    loaded = _snapshot(ctx).modules
    if requires in loaded and module not in loaded:
        yield f"modprobe {quote(module)}"


@operation()
def service_restarted(unit: str, before: str | None = None):
    """
    Restart a systemd unit; use with ``_if=when_changed(...)`` so it runs only when its files changed.

    + unit: e.g. ``munge.service``
    + before: a command run right before the restart (see ``service_running``)
    """
    if before:
        yield before
    yield f"systemctl restart {quote(unit)}"


@watching(_watch_accounts)
@operation()
def accounts(ctx, groups: list[tuple[str, int, bool]], users: list[dict]):
    """
    Groups and users with fixed IDs, created or corrected in one operation.

    + ctx: the node's NodeContext
    + groups: (name, gid, system) for each group
    + users: dicts with name, uid, group, groups (supplementary), shell, home, create_home, system

    An existing account with another UID/GID is changed to the inventory's (``usermod -u``,
    ``groupmod -g``); files owned by the old number keep it, which the message of the command says.
    A home kiln creates for a user (``create_home``, not ``system``) is closed to other users: created 0700
    (``HOME_MODE``, which Debian 12's login.defs leaves unset: 0755 from its umask), and one that has any
    permission for others loses it (``chmod o-rwx``; the owner's and the group's bits are the user's: the
    group is the user's own). Its path must be watched (``ctx.watch_path``).
    """
    snap = _snapshot(ctx)
    for name, gid, system in groups:
        current = snap.groups.get(name)
        if current is None:
            yield f"groupadd {'-r ' if system else ''}-g {quote(gid)} {quote(name)}"
        elif current[0] != gid:
            yield f"groupmod -g {quote(gid)} {quote(name)}"
    for u in users:
        name = quote(u["name"])
        current = snap.users.get(u["name"])
        extra = u.get("groups") or []
        if current is None:
            private = u["create_home"] and not u["system"]
            yield (f"useradd {'-r ' if u['system'] else ''}-u {quote(u['uid'])} -g {quote(u['group'])}"
                   f"{' -G ' + quote_all(extra, ',') if extra else ''} -s {quote(u['shell'])} -d {quote(u['home'])} "
                   f"{'-m' if u['create_home'] else '-M'}{' -K HOME_MODE=0700' if private else ''} {name}")
            continue
        if current.uid != u["uid"]:
            yield f"usermod -u {quote(u['uid'])} {name}"
        group_gid = snap.groups.get(u["group"], (None,))[0]
        wanted_gid = next((gid for g, gid, _ in groups if g == u["group"]), group_gid)
        if current.gid != wanted_gid:
            yield f"usermod -g {quote(u['group'])} {name}"
        if current.shell != u["shell"]:
            yield f"usermod -s {quote(u['shell'])} {name}"
        missing = [g for g in extra if u["name"] not in snap.groups.get(g, (0, set()))[1]]
        if missing:
            yield f"usermod -a -G {quote_all(missing, ',')} {name}"
        home = snap.files.get(u["home"]) if u["create_home"] and not u["system"] else None
        if home is not None and home.kind == "directory" and int(home.mode, 8) & 0o007:
            yield f"chmod o-rwx {quote(u['home'])}"


def logs_of(service: str, log_file: str | None = None) -> str:
    """Shell words that print the last lines of a unit's journal (and its own log file) on stderr."""
    tail = f"; tail -n 15 {quote(log_file)} >&2 2>/dev/null" if log_file else ""
    return f"journalctl -u {quote(service)} -n 15 --no-pager -o cat >&2{tail}"


def answers(what: str, probe: str, within: float, held_back: str, logs: str | None = None) -> str:
    """A command that waits until ``probe`` succeeds (tried every second, each try bounded by
    ``timeout 5``), for at most ``within`` seconds: the wait for a service another one needs at its
    start (slurmdbd before slurmctld, wherever slurmdbd runs). On time out it fails saying what did
    not answer and what was held back for it (``held_back``: "slurmctld was not started"), after
    ``logs`` (shell words printing the last log lines on stderr) where the service's logs are on this
    node: the verdict is the last line."""
    # the verdict comes last, after the log lines: it is the line a deploy's summary shows
    if logs:
        told = f"echo {quote(f'last log lines of {what}:')} >&2; {logs}; echo {quote(f'{what} did not answer within {within:.0f} s, so {held_back}')} >&2; "
    else:
        told = f"echo {quote(f'{what} did not answer within {within:.0f} s, so {held_back}: see its log there')} >&2; "
    return (f"end=$(( $(date +%s) + {int(within)} )); "
            f"until timeout 5 sh -c {quote(probe)} >/dev/null 2>&1; do "
            f"[ $(date +%s) -lt $end ] || {{ {told}exit 1; }}; sleep 1; done")


def tcp_answers(host: str, port: int) -> str:
    """A probe that succeeds once ``host`` accepts a TCP connection on ``port`` (bash's /dev/tcp: no
    client tool needed on the node)."""
    return f"bash -c {quote(f': </dev/tcp/{host}/{port}')}"


def settled(service: str, seconds: float = 3.0, ready: str | None = None, waiting: str | None = None,
            ready_within: float = 90.0, log_file: str | None = None, what: str | None = None) -> str:
    """A command that fails unless ``service`` stays active for ``seconds`` after a (re)start: a
    daemon can exit right after systemd called its start a success (slurmd with a bad gres.conf).
    ``ready``: a command that succeeds once the daemon serves what it is for (answers its own RPC,
    listens on its port): the wait ends there; one that stays active but does not answer within
    ``ready_within`` seconds fails, saying ``what`` did not answer, with its last log lines (a
    daemon that is active is not yet serving: slurmdbd opens its port only after it has read, or
    converted, its database). ``waiting``: a pattern of the unit's journal that means "stopped to
    wait for another node, retried by systemd" (a configless slurmd before slurmctld serves its
    files): that passes, said on stdout. ``log_file``: the daemon's own log, printed with its journal."""
    wait = (f"if journalctl -u {service} -n 20 --no-pager -o cat | grep -qE {quote(waiting)}; then "
            f"echo '{service} waits for its files from the controller; systemd retries it'; exit 0; fi; "
            if waiting else "")
    logs = logs_of(service, log_file)
    alive = (f"systemctl is-active --quiet {service} || {{ {wait}echo 'last log lines of {service}:' >&2; {logs}; "
             f"echo '{service} stopped after its start' >&2; exit 1; }}; ")
    if not ready:
        return f"for i in $(seq {max(1, int(seconds / 0.5))}); do sleep 0.5; {alive}done"
    within = int(ready_within)
    late = (f"echo 'last log lines of {service}:' >&2; {logs}; "
            f"echo {quote(f'{service} is active but {what or service} did not answer within {within} s')} >&2; exit 1")
    return (f"end=$(( $(date +%s) + {within} )); while :; do sleep 0.5; {alive}"
            f"timeout 5 sh -c {quote(ready)} >/dev/null 2>&1 && exit 0; [ $(date +%s) -lt $end ] || {{ {late}; }}; done")


def recorded_commands(ctx, name: str, record: str, content: str, commands: list[str]):
    """
    Run ``commands``, then write ``content`` to ``record``, only when the node's ``record`` is not ``content``:
    for settings a tool keeps in its own state (quotas), so an unchanged deploy asks nothing of it, and a
    run that fails before the end writes no record and is tried again by the next deploy.

    + ctx: the node's NodeContext (``record`` is watched with its snapshot)
    + name: the operation's name
    + record: absolute path of the record file (its directory is made, 0755)
    + content: what kiln set, as the record holds it
    + commands: shell lines, each run in order
    """
    return server.shell(name=name, commands=[*commands, f"install -d -m 755 {quote(posixpath.dirname(record))} && "
                                                        f"printf %s {quote(content)} > {quote(record)}"],
                        _if=record_differs(ctx, record, content))


def record_differs(ctx, record: str, content: str):
    """The condition under which ``recorded_commands`` runs (the node's ``record`` is not ``content``), for an
    operation that must run only then too (a secret its commands read, placed for that run alone)."""
    ctx.watch_path(record)
    wanted = sha1(content.encode()).hexdigest()
    return lambda: getattr(ctx.snapshot.files.get(record), "sha1", None) != wanted


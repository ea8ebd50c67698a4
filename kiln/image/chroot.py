"""Run a host's install stages into an image root, in a private mount namespace.

``kiln image build`` starts this module as ``unshare --mount --propagation private python -m
kiln.image.chroot ...``: the /proc, /sys and /dev mounts it makes for package scripts live in that
namespace only, so they disappear with the process however it ends (a killed build leaves no mount on
the host, and removing a half-built root can never reach the host's /dev). Packages' services are
kept from starting (policy-rc.d) and the root gets a temporary resolv.conf and, when given, an apt
proxy for the build; the builder removes all three when it cleans the image.

Prints the deploy result as JSON on stdout; exit 0 when every operation succeeded. With ``--command``
it runs one shell command in the root instead (the qcow2 output's kernel install).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

POLICY_RC = "usr/sbin/policy-rc.d"
BUILD_PROXY = "etc/apt/apt.conf.d/00kiln-image-build-proxy"
DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


def prepare_root(root: Path, proxy: str | None) -> None:
    """Mounts and files the package scripts need; call only inside a private mount namespace."""
    _mount("-t", "proc", "proc", str(root / "proc"))
    _mount("-t", "sysfs", "-o", "ro", "sysfs", str(root / "sys"))
    # A /dev of its own (tmpfs), not the host's bind-mounted: nothing done to the image's /dev can
    # touch the host's device nodes.
    _mount("-t", "tmpfs", "-o", "mode=755,size=1m", "kiln-image-dev", str(root / "dev"))
    for name, (major, minor) in DEVICES.items():
        os.mknod(root / "dev" / name, 0o20666, os.makedev(major, minor))
        os.chmod(root / "dev" / name, 0o666)  # apt's helpers run as _apt
    (root / "dev" / "pts").mkdir()
    _mount("-t", "devpts", "-o", "newinstance,ptmxmode=0666", "devpts", str(root / "dev" / "pts"))
    os.symlink("pts/ptmx", root / "dev" / "ptmx")
    os.symlink("/proc/self/fd", root / "dev" / "fd")
    (root / POLICY_RC).write_text("#!/bin/sh\n# kiln image build: no service starts in an image\nexit 101\n")
    (root / POLICY_RC).chmod(0o755)
    resolv = root / "etc" / "resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    shutil.copyfile("/etc/resolv.conf", resolv)
    if proxy:
        (root / BUILD_PROXY).write_text(f'Acquire::http::Proxy "{proxy}";\nAcquire::http::Pipeline-Depth "0";\n')


STEP = "kiln-step\t"  # a line on standard error: the operation the install stage starts now


class StepLines:
    """The deploy's events as ``STEP`` lines on standard error, for the build that runs this process to
    show (kiln.image.build); the outcome is in the JSON on standard output."""

    def step(self, host: str, what: str) -> None:
        print(STEP + " ".join(what.split()), file=sys.stderr, flush=True)

    def finish(self, host: str, outcome: str, detail: str = "") -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kiln.image.chroot")
    parser.add_argument("--inventory", type=Path)
    parser.add_argument("--host")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--proxy", default=None)
    parser.add_argument("--command", default=None, help="run this shell command in the root instead of roles")
    args = parser.parse_args(argv)
    if args.command:
        prepare_root(args.root, args.proxy)
        return subprocess.run(["chroot", str(args.root), "/bin/sh", "-c", args.command]).returncode

    from gevent import monkey
    from kiln.inventory import validate
    from kiln.image.recipe import NO_SECRETS

    cluster, errors = validate(args.inventory)
    if errors:
        print("\n".join(str(e) for e in errors), file=sys.stderr)
        return 2
    prepare_root(args.root, args.proxy)
    monkey.patch_all()
    from kiln.deploy.runner import Deploy
    result = Deploy(cluster, NO_SECRETS, [args.host], None, stages=("install",),
                    targets={args.host: f"@chroot{args.root}"},
                    progress=lambda line: print(line, file=sys.stderr, flush=True), events=StepLines()).run()
    print(json.dumps(result.as_dict()))
    return 1 if result.failed or result.stopped else 0


if __name__ == "__main__":
    sys.exit(main())

"""`kiln image build`: a node image from the inventory's roles, content-addressed by its recipe.

1. The recipe (kiln/image/recipe.py) names the image; an image of that name in the store is reused
   as it is (only outputs it lacks are made), so an unchanged recipe costs a plan, not a build.
2. The base root filesystem for the OS (Debian 12 or 13: kiln/image/base.py, debootstrapped once) is copied to
   ``NAME.tmp/rootfs``.
3. Every role's install stage for the target's hosts runs into it through pyinfra's chroot
   connector, in a private mount namespace (kiln/image/chroot.py), with services kept from starting.
4. The tree is cleaned for reuse: no machine-id, SSH host keys (a first-boot unit makes the
   machine's own), package caches or lists, logs, build-time apt proxy or resolv.conf, and no
   secret (the munge key a package made, any slurmdbd.conf); the build refuses to finish if a
   secret file is still there.
5. The manifest is read from the tree, the asked outputs made, and ``NAME.tmp`` renamed to ``NAME``.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kiln import __version__
from kiln.image import base as image_base
from kiln.image import manifest as manifest_mod
from kiln.image import outputs
from kiln.image import store as image_store
from kiln.image.chroot import STEP
from kiln.image.clean import CLEAN_GLOBS, SECRET_FILES, ImageBuildError, clean  # noqa: F401 - kiln's names for them
from kiln.image.commands import run_step
from kiln.image.recipe import ImageRecipe
from kiln.inventory.model import Cluster

FORMATS = ("dir", "tar", "qcow2", "vagrant-box")

# Removed from every image: per-machine identity, caches, logs, and the build's own helpers.
# Host keys are per machine: a machine booted from the image makes its own at first boot (the testbed
# writes each node's before it boots, and the unit then does nothing).
HOSTKEYS_UNIT = """[Unit]
Description=kiln image: this machine's own SSH host keys, made at first boot
ConditionPathExistsGlob=!/etc/ssh/ssh_host_*_key
Before=ssh.service sshd.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""


@dataclass
class BuildResult:
    name: str
    path: Path
    cached: bool
    seconds: float
    formats: list[str]
    sizes: dict[str, int]

    def as_dict(self) -> dict:
        return {"name": self.name, "path": str(self.path), "cached": self.cached, "seconds": round(self.seconds, 2),
                "formats": self.formats, "bytes": self.sizes}


def build(cluster: Cluster, recipe: ImageRecipe, formats: list[str], progress: Callable[[str], None] = print,
          proxy: str | None = None, store: Path | None = None, events=None) -> BuildResult:
    """Build (or find) the image of ``recipe`` with ``formats``. ``progress``: one line per stage;
    ``events``: told what the build does now (step(image, what), kiln.cli.progress.Progress)."""
    started = time.monotonic()
    step = (lambda what: events.step(recipe.name, what)) if events is not None else (lambda what: None)
    root_store = store or image_store.STORE
    root_store.mkdir(parents=True, exist_ok=True)
    final = root_store / recipe.name
    with open(root_store / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time: any NAME.tmp found now is a crashed one's
        cached = (final / "manifest.json").is_file()
        if not cached:
            _build_tree(cluster, recipe, final, progress, proxy, root_store, step)
        image = image_store.StoredImage(final)
        for fmt in formats:
            if fmt not in image.formats:
                progress(f"{recipe.name}: writing the {fmt} output")
                step(f"writing the {fmt} output")
                if fmt == "qcow2":
                    outputs.write_qcow2(image, proxy)
                elif fmt == "vagrant-box":
                    outputs.write_vagrant_box(image, proxy)
                else:
                    outputs.write_tar(image)
        return BuildResult(recipe.name, final, cached, time.monotonic() - started, image.formats,
                           {f: image.size(f) for f in image.formats})


def _build_tree(cluster: Cluster, recipe: ImageRecipe, final: Path, progress, proxy: str | None,
                root_store: Path, step: Callable[[str], None]) -> None:
    if recipe.os not in image_base.LIVE:
        raise ImageBuildError(f"{recipe.target}: kiln builds {recipe.os} images as a plan only "
                              f"(kiln image build --plan); live builds: {', '.join(image_base.LIVE)}")
    for stale in image_store.stale_builds(root_store):
        progress(f"removing {stale.name}, left by a build that did not finish")
        shutil.rmtree(stale)
    try:
        base = image_base.ensure_base(recipe.os, progress)
    except image_base.BaseBuildError as exc:
        raise ImageBuildError(f"{recipe.target}: {exc}") from exc
    tmp = root_store / f"{recipe.name}.tmp"
    name = image_base.BASES[recipe.os].name
    progress(f"{recipe.name}: copying the {name} base")
    step(f"copying the {name} base")
    tmp.mkdir()
    run_step(["cp", "-a", "--reflink=auto", str(base), str(tmp / "rootfs")], "copy the base", 600, ImageBuildError)
    root = tmp / "rootfs"
    progress(f"{recipe.name}: install stage of {', '.join(recipe.roles)} (as {recipe.host}) into the image")
    command = ["unshare", "--mount", "--propagation", "private", sys.executable, "-m", "kiln.image.chroot",
               "--inventory", str(cluster.path), "--host", recipe.host, "--root", str(root)]
    if proxy:
        command += ["--proxy", proxy]
    log = tmp / "build.log"
    returncode, stdout = _install_stage(command, log, step)
    try:
        deploy = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {}
    except ValueError:
        deploy = {}
    if returncode != 0:
        host = (deploy.get("hosts") or [{}])[0]
        raise ImageBuildError(f"{recipe.name}: the install stage failed"
                              + (f" at {host.get('failed_operation')!r}:\n{host.get('error')}" if host else "")
                              + f"\n(the build's log: {log}; the half-built tree stays in {tmp} until the next build)")
    progress(f"{recipe.name}: {len((deploy.get('hosts') or [{}])[0].get('changed', []))} operations changed the "
             "image; cleaning it")
    step("cleaning the tree")
    clean(root)
    unit = root / "etc/systemd/system/kiln-ssh-hostkeys.service"
    unit.write_text(HOSTKEYS_UNIT)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / unit.name).unlink(missing_ok=True)
    (wants / unit.name).symlink_to(f"/etc/systemd/system/{unit.name}")
    (root / "etc" / "kiln").mkdir(parents=True, exist_ok=True)
    manifest = manifest_mod.read_manifest(root, recipe, tools=tool_versions())
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    (tmp / "manifest.json").write_text(text)
    (root / "etc" / "kiln" / "image-manifest.json").write_text(text)  # the drift suite's reference on nodes
    log.unlink()
    tmp.rename(final)


def _install_stage(command: list[str], log: Path, step: Callable[[str], None],
                   timeout: float = 3600) -> tuple[int, str]:
    """Run the install stage (kiln.image.chroot): its standard error into ``log``, each operation it
    starts (a ``STEP`` line) told to ``step``; (exit status, standard output)."""
    with open(log, "w") as err, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                  text=True) as proc:
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
        reader.start()
        try:
            for line in proc.stderr:
                if line.startswith(STEP):
                    step("install: " + line[len(STEP):].strip())
                err.write(line)
            proc.wait()
            reader.join()
        finally:
            timer.cancel()
    if proc.returncode < 0:
        return proc.returncode, f"(the install stage was killed after {timeout:.0f} s)"
    return proc.returncode, "".join(out)


def tool_versions() -> dict[str, str]:
    import pyinfra
    versions = {"kiln": __version__, "pyinfra": getattr(pyinfra, "__version__", "")}
    debootstrap = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "debootstrap"], capture_output=True, text=True)
    versions["debootstrap"] = debootstrap.stdout.strip() if debootstrap.returncode == 0 else ""
    return versions



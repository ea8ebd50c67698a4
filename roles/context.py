"""What a role gets when it runs on one node, and the two helpers every role uses.

``NodeContext`` carries the validated cluster, the node, its platform and the cluster's secrets.
``ctx.put`` writes a whole managed file (explicit owner, group and mode, always) and remembers its
new content so ``kiln deploy --dry-run`` can show a diff with secrets masked. ``render`` fills a
template from ``templates/`` with strict undefined names, so a missing value is an error, not an
empty line in slurm.conf.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import jinja2

from kiln.inventory.formats import CONTROL
from kiln.inventory.model import Cluster, Host, Secrets
from roles.operations import (changed_any, line_placed_before, managed_file, secret_file, validated_file,  # noqa: F401
                              when_changed)
from roles.platform import Platform

TEMPLATES = Path(str(files("templates")))  # package data: a source checkout and an installed kiln alike


class RenderError(ValueError):
    pass


def _one_field(value: Any) -> Any:
    """Every ``{{ value }}`` fills its own field: a value with a line break or other control character
    would add lines of its own to the file (validation refuses such values; this is the second wall)."""
    if isinstance(value, str) and CONTROL.search(value):
        raise RenderError(f"refusing to render {value[:60]!r}: it holds a control character (a line break?)")
    return value


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                              autoescape=False, finalize=_one_field)


def render(template: str, **values: Any) -> str:
    """Render ``templates/<template>`` with ``values``."""
    return _environment().get_template(template).render(**values)


@dataclass(frozen=True)
class ManagedFile:
    path: str
    content: bytes
    secret: bool
    op: Any  # pyinfra OperationMeta
    mode: str = "644"
    user: str = "root"
    group: str = "root"
    name: str = ""   # the operation that writes it


@dataclass
class NodeContext:
    cluster: Cluster
    node: Host
    platform: Platform
    secrets: Secrets
    in_container: bool = False
    files: list[ManagedFile] = field(default_factory=list)
    marks: dict[str, list[Any]] = field(default_factory=dict)
    # What kiln's operations on this node compare against (roles/snapshot.py): registered while
    # operations are prepared, read once before they run.
    paths: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)
    line_anchors: dict[int, str] = field(default_factory=dict)  # watched line -> what it must come before
    modules: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    snapshot: Any = None
    # units kept stopped until configured (roles/operations.py kept_stopped_until_configured): unit -> its
    # package; masked in this run where the snapshot had no such package, unmasked when kiln starts them
    kept_stopped: dict[str, str] = field(default_factory=dict)
    # the run configures the node too (a deploy), not only installs (an image build, where no daemon starts)
    configures: bool = True

    def watch_path(self, path: str) -> None:
        self._watch(self.paths, [path])

    def watch_unit(self, unit: str) -> str:
        unit = unit if "." in unit else unit + ".service"
        if unit not in self.units:
            self.units.append(unit)
        return unit

    def watch_module(self, name: str) -> None:
        """Read whether kernel module ``name`` is loaded, and its version, with the snapshot."""
        self._watch(self.modules, [name])

    def watch_packages(self, names) -> None:
        """Read whether packages ``names`` are installed, and at which version, with the snapshot."""
        self._watch(self.packages, names)

    def watch_accounts(self, users=(), groups=()) -> None:
        """Read users ``users`` and groups ``groups`` (IDs, members) with the snapshot."""
        self._watch(self.users, users)
        self._watch(self.groups, groups)

    @staticmethod
    def _watch(watched: list[str], names) -> None:
        for name in names:
            if name not in watched:
                watched.append(name)

    def watch_line(self, path: str, regex: str) -> int:
        self.lines.append((path, regex))
        return len(self.lines) - 1

    def watch_line_before(self, path: str, regex: str, anchor: str) -> int:
        """``watch_line`` for a line that counts as there only where it comes before the first line matching
        ``anchor`` (or where no line does): a PAM stack is read top down, and a line after a module that
        ends the stack early is never reached."""
        index = self.watch_line(path, regex)
        self.line_anchors[index] = anchor
        return index

    def pam_account_line(self, line: str, regex: str, name: str) -> Any:
        """``line`` (matched by ``regex``) in sshd's account stack, before anything there that can end the
        stack early or hand it to another file (``Platform.pam_account_anchor``)."""
        pam, anchor = self.platform.pam_sshd, self.platform.pam_account_anchor
        return line_placed_before(name=name, ctx=self, path=pam, line=line, regex=regex, anchor=anchor,
                                  index=self.watch_line_before(pam, regex, anchor))

    def watch_exact_line(self, path: str, line: str) -> int:
        """``watch_line`` for exactly ``line`` (grep -E's special characters escaped, nothing else)."""
        return self.watch_line(path, "^" + re.sub(r"([][\\.*+?(){}|^$])", r"\\\1", line) + "$")

    def put(self, path: str, content: str | bytes, *, mode: str, user: str = "root", group: str = "root",
            secret: bool = False, name: str | None = None, check: str | None = None) -> Any:
        """Write ``content`` to ``path`` when content, owner or mode differ; return the operation.
        ``check``: a command (``{}`` for the candidate file) that must accept the new content before it
        replaces the file (``validated_file``)."""
        data = content.encode() if isinstance(content, str) else content
        self.watch_path(path)
        name = name or f"file {path}"
        if check:
            op = validated_file(name=name, ctx=self, path=path, content=data, mode=mode, user=user, group=group,
                                check=check)
        else:
            op = (secret_file if secret else managed_file)(name=name, ctx=self, path=path, content=data,
                                                           mode=mode, user=user, group=group)
        self.files.append(ManagedFile(path, data, secret, op, mode, user, group, name))
        return op

    def mark(self, tag: str, op: Any) -> Any:
        """Remember an operation under a tag (e.g. ``slurm_conf``) for decisions after the run."""
        self.marks.setdefault(tag, []).append(op)
        return op

    def changed(self, tag: str) -> bool:
        """Whether any operation marked ``tag`` changed something (only after execution)."""
        return any(op.is_complete() and op.did_change() for op in self.marks.get(tag, []))

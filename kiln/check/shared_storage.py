"""The shared-storage check (STORAGE_SHARED): every node mounting a shared filesystem sees the data its
other nodes write there, settled by kiln check (``RemoteCheck``) across nodes.

The first node of each shared filesystem swaps a marker file (this run's token, put in by one rename) in
its one batch of commands, the others read it in theirs; only a node whose read cannot be told apart is
asked again. Every command that touches a mount is bounded (a marker is a few bytes: a third of
``kiln_check_storage_timeout``); a node whose read ran out of time gets no verdict (STORAGE_RESPONDING
reports a mount that does not answer).
"""

from __future__ import annotations

import concurrent.futures
import time

from checks.node import NO_ANSWER, Node, Result, bounded
from checks.verdict import Verdict, fail, ok
from kiln.inventory.model import Cluster, Host
from kiln.shell import quote

SHARED_MARKER = ".kiln-shared-check"
WRITER_TRIES = 3  # hosts asked to write the marker when the planned writer could not


class SharedStorage:
    """Mixed into RemoteCheck, whose run it reads: ``cluster``, ``hosts``, ``token``, ``shared`` (from
    ``_shared_mounts``), ``outputs`` (each node's batch), ``results`` (verdicts so far) and ``node``."""

    cluster: Cluster
    hosts: list[Host]
    token: str
    shared: dict[tuple[str, str], list[Host]]
    outputs: dict[str, dict[str, Result]]
    results: dict[str, list[Verdict]]

    def node(self, host: Host) -> Node:
        raise NotImplementedError

    def _shared_mounts(self) -> dict[tuple[str, str], list[Host]]:
        """(path, source) -> the hosts mounting it, for every filesystem at least two hosts share."""
        by_mount: dict[tuple[str, str], list[Host]] = {}
        for h in self.hosts:
            for m in h.storage_mounts:
                if m.type != "tmpfs":
                    by_mount.setdefault((m.path, m.source), []).append(h)
        return {k: hosts for k, hosts in by_mount.items() if len(hosts) >= 2}

    def _marker_commands(self, path: str) -> tuple[str, str, str, str]:
        """For the shared filesystem at ``path``: the first node's command (print the marker the last run
        left, then put this run's token in its place), the others' (print the marker), the fallback
        writer's (put the token only), and the last read before a node fails (the directory listed first). The token goes in by one rename, so a reader sees the old or the
        new one, never a file being written; nothing is written under an empty mount point."""
        marker = f"{path.rstrip('/')}/{SHARED_MARKER}"
        quoted, tmp = quote(marker), quote(f"{marker}.{self.token}")
        guard, put = f"mountpoint -q {quote(path)}", f"echo {self.token} > {tmp} && mv -f {tmp} {quoted}"
        # A marker is a few bytes: a mount that answers does so in well under a second. A short bound keeps a
        # hung mount (which the probe has already reported) from costing the check a second full timeout.
        seconds = max(2, self.cluster.setting("check_storage_timeout") // 3)
        return (bounded(f"{guard} && {{ cat {quoted} 2>/dev/null; {put}; }}", seconds),
                bounded(f"cat {quoted}", seconds), bounded(f"{guard} && {{ {put}; }}", seconds),
                bounded(f"ls -a {quote(path)} >/dev/null 2>&1; cat {quoted}", seconds))

    def _shared_commands(self, host: Host) -> dict[tuple[str, str], str]:
        """What ``host`` runs in its batch for the shared-storage check, per shared filesystem it mounts:
        the first host swaps the marker, the others read it (``_marker_commands``)."""
        return {(path, source): self._marker_commands(path)[0 if host is hosts[0] else 1]
                for (path, source), hosts in self.shared.items() if host in hosts}

    def _shared_storage(self) -> None:
        """Every node mounting a shared filesystem must see the marker its first node wrote.

        Settled from the first batch's outputs: a node that read this run's token, or the one the writer
        replaced, sees the writer's filesystem. Any other node (it found no marker, read before the first
        ever marker was written or while another kiln check wrote its own, or is on another filesystem)
        is asked again together with the writer, and passes only if both read the same token: one round
        trip, only for nodes that would otherwise fail or cannot be told yet. A filesystem whose first
        node could not write (unreachable, not mounted there, read-only) is written by one of the next
        nodes and read on the others, a round trip each."""
        for (path, source), planned in self.shared.items():
            # reachable, and the mount answered there (a hung mount would only make each try wait out its bound)
            swap, read, _, _ = self._marker_commands(path)
            # ... and whose batch's own marker command did not run out of time (no verdict either way)
            hosts = [h for h in planned if h.name in self.outputs and not self._mount_broken(h, path)
                     and all(self.outputs[h.name].get(c, Result(0, "")).rc != NO_ANSWER for c in (swap, read))]
            if len(hosts) < 2:
                continue
            writer, why = planned[0], {}
            wrote = self.outputs[writer.name].get(swap) if writer in hosts else None
            if wrote is None or wrote.rc != 0:
                writer, seen_by = self._write_then_read(path, hosts)
                if writer is None:
                    continue  # no node could write: STORAGE_MOUNTED / STORAGE_WRITABLE say why
            else:
                old = wrote.stdout.strip()
                seen = {h.name: self.outputs[h.name].get(read, Result(1, "")).stdout.strip()
                        for h in hosts if h is not writer}
                seen_by = {name: True for name, found in seen.items() if found == self.token or (found and found == old)}
                seen_by[writer.name] = True
                # Anything else is asked again, with the writer, before it fails: no marker where the writer
                # replaced one is another filesystem, or an NFS client whose cached handle of the replaced
                # file failed that one read (the rename leaves no gap on the server, a client may see one)
                unsure = [h for h in hosts if h.name not in seen_by]
                if unsure:
                    confirmed, why = self._confirm(path, writer, unsure)
                    seen_by.update(confirmed)
            for h in hosts:
                if h.name not in seen_by:
                    continue  # its read, or the writer's, ran out of time: cannot be told (no verdict)
                verdict = ok("STORAGE_SHARED", f"{path}: sees what {writer.name} wrote") if seen_by[h.name] else \
                    fail("STORAGE_SHARED", f"{path}: does not see what {writer.name} wrote: it is not the same "
                         f"filesystem ({source}) as on the other nodes" + (f" ({why[h.name]})" if h.name in why else ""))
                self.results[h.name].append(Verdict(verdict.id, verdict.severity, verdict.message, "storage"))

    def _confirm(self, path: str, writer: Host, unsure: list[Host]) -> tuple[dict[str, bool], dict[str, str]]:
        """Read the marker on ``writer`` and ``unsure`` at once; a node passes if it read what the writer
        read. One still disagreeing is asked once more (two seconds later, listing the directory first: a
        client's cached view of it is refreshed) before it fails. Returns node -> seen (a node whose read,
        or whose writer's, ran out of time is left out: no verdict), and node -> what it read, for a
        failing node's message."""
        _, read, _, fresh = self._marker_commands(path)
        seen: dict[str, bool] = {}
        why: dict[str, str] = {}
        for command in (read, fresh):
            if command is fresh:
                time.sleep(2)
            now = self._read_on([writer] + unsure, command)
            theirs = now[writer.name]
            if theirs.rc == NO_ANSWER:
                left = {h.name for h in unsure}
                return {n: v for n, v in seen.items() if n not in left}, why
            for h in unsure:
                mine = now[h.name]
                if mine.rc == NO_ANSWER:
                    seen.pop(h.name, None)
                    continue
                seen[h.name] = bool(theirs.stdout.strip()) and mine.stdout.strip() == theirs.stdout.strip()
                why[h.name] = f"it read {mine.stdout.strip()[:40] or 'nothing'} (exit {mine.rc}" + \
                    (f": {mine.stderr.strip().splitlines()[-1][:80]}" if mine.stderr.strip() else "") + \
                    f"), {writer.name} read {theirs.stdout.strip()[:40] or 'nothing'}"
            unsure = [h for h in unsure if seen.get(h.name) is False]
            if not unsure:
                break
        return seen, why

    def _mount_broken(self, host: Host, path: str) -> bool:
        """Whether the storage suite found ``path`` not answering on ``host`` (STORAGE_RESPONDING says so)."""
        return any(v.failed and v.id == "STORAGE_RESPONDING" and
                   (v.message.startswith(path + " ") or v.message.startswith(path + ":"))
                   for v in self.results.get(host.name, []))

    def _read_on(self, hosts: list[Host], command: str) -> dict[str, Result]:
        """Host name -> how ``command`` ran there, all hosts at once."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(64, max(1, len(hosts)))) as pool:
            return dict(zip([h.name for h in hosts], pool.map(lambda h: self.node(h).run(command), hosts)))

    def _write_then_read(self, path: str, hosts: list[Host]) -> tuple[Host | None, dict[str, bool]]:
        """The slow way, when the planned writer could not write: the first of the next few hosts that
        can writes this run's token and the others read it. Returns the writer, or None when none of
        them could write (a filesystem read-only for root everywhere: STORAGE_WRITABLE says so on each
        node, and trying every node in turn would cost a round trip per node)."""
        _, read, write, _ = self._marker_commands(path)
        for writer in hosts[:WRITER_TRIES]:
            if self.node(writer).run(write).rc == 0:
                found = self._read_on([h for h in hosts if h is not writer], read)
                return writer, {writer.name: True} | {name: out.stdout.strip() == self.token
                                                   for name, out in found.items() if out.rc != NO_ANSWER}
        return None, {}

"""kiln-remediate: repairs the compute nodes kiln's checks (or Slurm itself) took out of service, on the
controller, as a systemd service (roles/remediation.py) or by hand.

    kiln-remediate [--once] [--dry-run] [--json] [--reset-breaker] [--config /etc/kiln/remediation.json]

Each look: Slurm's view of the compute nodes (one ``sinfo``, one ``scontrol show node``), the journal
replayed into each node's history, a decision per node (checks/remediation_policy.py), then the actions:
a step of the node's ladder (checks/repairs.py) through the node's forced-command SSH key
(checks/node_repair.py, host keys checked against the inventory's) or ``scontrol reboot``, or, for a
node that answers neither Slurm nor SSH, a power cycle through its BMC (checks/redfish.py; checks/ipmi.py
where it has no Redfish); kiln's node checks run on the node after each repair, and the node is resumed when they pass; a step is judged
by the check it was for (a node that passes it but fails another has a new fault, with its own ladder:
``judge``). The journal
(JOURNAL, one JSON line per decision and action, written before the action) is the audit trail and the
state: a service killed mid-repair starts again where the journal ends and never repeats a step. One
look at a time (LOCK). Metrics for node_exporter's textfile collector (kiln-remediation.prom).
Standard library only (the controller's python3).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a script from the installed tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from checks import ipmi, redfish, repairs  # noqa: E402
from checks.alertmanager import AlertmanagerError, expire_silences, make_silences  # noqa: E402
from checks.parsers import sinfo  # noqa: E402
from checks.parsers.delimited import separator  # noqa: E402
from checks.remediation_metrics import metrics, write_metrics  # noqa: E402
from checks.parsers.scontrol import SlurmRecordError, show_node_command, show_nodes  # noqa: E402
from checks.parsers.slurm_values import SLURM_ENV, epoch  # noqa: E402
from checks.drain_reasons import classify  # noqa: E402
from checks.remediation_policy import (ESCALATED_PREFIX, REPAIR_PREFIX, Decision, NodeView, Settings,  # noqa: E402
                                       breaker, decide, judge, most_severe, replay)

CONFIG = "/etc/kiln/remediation.json"
JOURNAL = "/var/lib/kiln/remediation/journal.jsonl"
LOCK = "/run/kiln-remediate.lock"
CHECK_ID_RE = re.compile(repairs.CHECK_ID)
# what ssh (or this program's own timeout) says when it got no session at all: the node's power, its
# network or a hung kernel, not a service a restart mends
NO_SESSION = re.compile(r"Connection timed out|No route to host|Connection refused|Network is unreachable|"
                        r"Host is down|timed out after")  # not "Connection closed": sshd answered


def unreachable(view: NodeView, out: subprocess.CompletedProcess) -> bool:
    """The node answers neither Slurm (its state ends in ``*``: not responding) nor SSH (exit 255, no
    session)."""
    return view.state.endswith("*") and out.returncode == 255 and bool(NO_SESSION.search(out.stderr or ""))


def parse_views(sinfo_text: str, scontrol: str, nodes: list[str], sep: str) -> list[NodeView]:
    """The compute nodes of the config as Slurm shows them; a node Slurm does not list is left out. Read
    whole or not at all: a drain reason holding a newline and another node's line stays its own node's
    reason, and an answer that does not parse whole raises SlurmRecordError (no look is better than a
    guess that reboots a node running jobs)."""
    shown, framed = sinfo.read_nodes(sinfo_text, sep)
    if framed.bad:
        raise SlurmRecordError(framed.problem("sinfo"))
    boots = {name: epoch(fields.get("BootTime", "")) for name, fields in show_nodes(scontrol).items()}
    return [NodeView(n, shown[n].state, shown[n].reason, boots.get(n), epoch(shown[n].reason_time))
            for n in nodes if n in shown]


def read_journal(path: str) -> list[dict]:
    events = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if isinstance(e, dict):
                    events.append(e)
    except FileNotFoundError:
        pass
    return events


class Remediator:
    def __init__(self, config: dict, dry_run: bool = False, out=print, clock=time.time):
        self.config, self.dry_run, self.out, self.clock = config, dry_run, out, clock
        self.settings = Settings(**{k: v for k, v in config.get("settings", {}).items()
                                    if k in Settings.__dataclass_fields__})
        self.journal = config.get("journal", JOURNAL)
        self.decisions: list[dict] = []

    # --- I/O ---
    def _run(self, args: list[str], timeout: int = 60) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                                  env={**os.environ, **SLURM_ENV})
        except (OSError, subprocess.TimeoutExpired) as e:
            return subprocess.CompletedProcess(args, 255, "", str(e))

    def ssh(self, node: str, words: str, timeout: int = 300) -> subprocess.CompletedProcess:
        n = self.config["nodes"][node]
        return self._run(["ssh", "-i", self.config["key"], "-p", str(n.get("port", 22)), "-o", "BatchMode=yes",
                          "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={self.config['known_hosts']}",
                          "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-F", "/dev/null",
                          f"root@{n['address']}", words], timeout=timeout)

    def log(self, event: str, node: str = "", **fields) -> None:
        record = {"t": round(self.clock(), 3), "event": event, **({"node": node} if node else {}), **fields}
        if self.dry_run:
            return
        os.makedirs(os.path.dirname(self.journal), exist_ok=True)
        with open(self.journal, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def scontrol(self, *words: str) -> subprocess.CompletedProcess:
        return self._run(["scontrol", *words])

    def views(self) -> list[NodeView]:
        sep = separator()
        listed, show = self._run(sinfo.nodes_command(sep)), self._run(show_node_command())
        if listed.returncode != 0:
            raise RuntimeError(f"sinfo failed: {(listed.stderr or listed.stdout).strip()[:200]}")
        try:
            return parse_views(listed.stdout, show.stdout, sorted(self.config["nodes"]), sep)
        except SlurmRecordError as e:
            raise RuntimeError(f"Slurm's answer about the nodes is not readable whole: {e}") from None

    def check(self, node: str) -> tuple[bool, list[str]]:
        """kiln's node checks on the node, and Slurm's own view of it (what the node cannot see of itself):
        (all passed, the failing ids with their messages)."""
        out = self.ssh(node, "check")
        try:
            verdicts = json.loads(out.stdout)["verdicts"]
        except (ValueError, KeyError, TypeError):
            return False, [f"no check result ({(out.stderr or out.stdout).strip()[:200] or 'rc ' + str(out.returncode)})"]
        failed = [f"{v['id']} {v['message']}"[:160] for v in verdicts if v.get("severity") == "fail"]
        failed += self.slurm_refuses(node)
        return not failed, failed

    def slurm_refuses(self, node: str) -> list[str]:
        """Slurm's refusal of the node's registration (INVALID_REG: slurmd found fewer GPUs, less memory or
        fewer CPUs than configured), as '<check> <reason>': the node's own checks do not ask the
        controller, and the reason stays after a good registration, the flag does not."""
        out = self._run(show_node_command(node))
        fields = show_nodes(out.stdout).get(node, {}) if out.returncode == 0 else {}
        if "INVALID_REG" not in fields.get("State", ""):
            return []
        reason = fields.get("Reason", "")
        return [f"{classify(reason).check or 'SLURM_INVALID_REG'} Slurm refused its registration: {reason}"[:160]]

    # --- one look ---
    def look(self) -> list[dict]:
        now = self.clock()
        history = replay(read_journal(self.journal))
        views = self.views()
        why = "" if history.breaker_open else breaker(views, history, self.settings, now)
        if why:
            self.out(f"circuit breaker opens: {why}")
            self.log("breaker_open", why=why)
            history.breaker_open = True
        for view in views:
            n = history.node(view.name)
            d = decide(view, n, self.settings, now, history.breaker_open, bmc=self.has_bmc(view.name))
            if d.action == "open":
                faults = self.faults(view.name, d.check)
                d = Decision("open", d.why, check=most_severe(faults))
                self.act(view, d, faults=faults)
                history = replay(read_journal(self.journal)) if not self.dry_run else history
                n = history.node(view.name)
                if self.dry_run:
                    continue
                d = decide(view, n, self.settings, now, history.breaker_open, bmc=self.has_bmc(view.name))
            if d.action == "return" and n.episode is not None and n.episode.steps \
                    and n.episode.steps[-1]["result"] is None and not self.dry_run:
                # the node's own health check passed and resumed it before this look could verify
                self.log("result", view.name, step=n.episode.steps[-1]["step"], result="ok",
                         detail="back in service: the node's checks passed (its HealthCheckProgram resumed it)")
            if d.action != "none":
                self.act(view, d, repeated=d.action == "hold" and d.why == n.last_held)
        return self.decisions

    def faults(self, name: str, check: str) -> list[str]:
        """Every fault the node has now: its drain reason's check, then each check it fails (read on the
        node; none added when its checks cannot be read, nor in a dry run, which touches no node)."""
        if self.dry_run:
            return [check]
        _, failing = self.check(name)
        ids = [line.split(" ", 1)[0] for line in failing]
        return list(dict.fromkeys([check, *(i for i in ids if CHECK_ID_RE.fullmatch(i))]))

    def act(self, view: NodeView, d: Decision, repeated: bool = False, faults: list[str] | None = None) -> None:
        """Report the decision and carry it out; a hold said on the last look too is reported, not
        written again."""
        name = view.name
        self.decisions.append({"node": name, "action": d.action, "why": d.why, "step": d.step, "check": d.check})
        if repeated:
            return
        self.out(f"{name}: {d.action}{' ' + d.step if d.step else ''}: {d.why}")
        if self.dry_run:
            return
        if d.action == "open":
            self.log("fault", name, check=d.check, reason=view.reason, drained_at=view.drained_at,
                     faults=faults or [d.check])
        elif d.action in ("hold", "release"):
            self.log("held" if d.action == "hold" else "released", name, why=d.why)
        elif d.action == "return":
            self.log("returned", name, why=d.why)
            self.unsilence(name, after=True)
        elif d.action == "escalate":
            self.unsilence(name)  # a person's turn: its alerts page now
            reason = f"{ESCALATED_PREFIX} {d.check}: {d.why}; needs a person"[:200]
            done = self.scontrol("update", f"nodename={name}", "state=drain", f"reason={reason}")
            self.log("escalated", name, check=d.check, why=d.why, reason=reason, rc=done.returncode)
        elif d.action == "step":
            self.step(view, d)
        elif d.action == "verify":
            self.verify(name, d, before=None)

    def has_bmc(self, name: str) -> bool:
        return bool(self.config["nodes"].get(name, {}).get("bmc"))

    def step(self, view: NodeView, d: Decision) -> None:
        name = view.name
        passed, before = (self.check(name) if d.step not in (repairs.REBOOT, repairs.POWER_CYCLE)
                          else (False, [view.reason]))
        self.log("step", name, step=d.step, check=d.check, before=before)
        if d.step == repairs.POWER_CYCLE:
            self.power_cycle(name, d)
            return
        if d.step == repairs.REBOOT:
            if view.state.endswith("*"):
                # Slurm reboots a node through its slurmd (RebootProgram): one that does not answer (slurmd
                # stopped beside the fault that needs the reboot) gets its slurmd back first
                restarted = self.ssh(name, "restart slurmd")
                if unreachable(view, restarted):
                    self._unreachable(name, d, restarted)
                    return
            # not ASAP: Slurm would undrain the node after its reboot; a drained node's plain reboot keeps
            # it drained until the checks pass on it (its HealthCheckProgram or the next look resumes it)
            reason = f"{REPAIR_PREFIX} reboot {d.check}"
            self.silence(name, f"reboot for {d.check}")
            done = self.scontrol("reboot", f"reason={reason}", name)
            if done.returncode != 0:
                self.log("result", name, step=d.step, result="failed",
                         detail=(done.stderr or done.stdout).strip()[:300])
            return
        if passed:  # cleared by itself (a transient fault): nothing to repair, only to check and resume
            self.log("result", name, step=d.step, result="skipped", detail="the checks pass already")
            self.resume(name)
            return
        words = "reset" if d.step == repairs.RESET else "restart " + d.step.split(":", 1)[1]
        if d.step == repairs.RESET:
            self.silence(name, f"GPU reset for {d.check}")
        done = self.ssh(name, words)
        if unreachable(view, done):
            self._unreachable(name, d, done)
            return
        if done.returncode != 0:
            self.log("result", name, step=d.step, result="failed", before=before,
                     detail=(done.stderr or done.stdout).strip()[:300] or f"rc {done.returncode}")
            return
        self.verify(name, d, before)

    def _unreachable(self, name: str, d: Decision, out: subprocess.CompletedProcess) -> None:
        """No session on the node and no answer to Slurm: no step of its ladder can run there; the next
        look escalates (remediation_policy.decide)."""
        self.log("result", name, step=d.step, result="unreachable",
                 detail=f"no answer on SSH ({(out.stderr or '').strip()[:200]}) and none to Slurm: its power, "
                        "network or kernel")

    def power_cycle(self, name: str, d: Decision) -> None:
        """Drained first with kiln's repair reason (the node comes back drained, and stays so until its
        checks pass: a registration alone returns a node that was down), then power-cycled by its BMC."""
        reason = f"{REPAIR_PREFIX} power_cycle {d.check}"
        drained = self.scontrol("update", f"nodename={name}", "state=drain", f"reason={reason}")
        if drained.returncode != 0:
            self.log("result", name, step=d.step, result="failed",
                     detail=f"scontrol drain: {(drained.stderr or drained.stdout).strip()[:200]}")
            return
        self.silence(name, f"power cycle for {d.check}")
        bmc = self.config["nodes"][name]["bmc"]
        protocol = ipmi if bmc.get("protocol") == "ipmi" else redfish  # Redfish unless the BMC has none
        try:
            sent = protocol.power_cycle_node(bmc, self.config.get("bmc_password_file", ""))
        except (redfish.RedfishError, ipmi.IpmiError) as e:
            self.log("result", name, step=d.step, result="failed", detail=str(e)[:300])
            return
        self.log("power_cycled", name, reset_type=sent)

    # --- silences: a reboot or GPU reset is planned work, and pages nobody while it lasts ---
    def silence(self, name: str, work: str) -> None:
        """Silence the node's alerts in Alertmanager (the config's ``alertmanager``: url, password_file, ca_file)
        from now until the reboot's bound and a margin; expired when the node returns or is escalated.
        Where Alertmanager does not answer the repair goes on: its alerts fire."""
        am = self.config.get("alertmanager")
        if not am:
            return
        now = self.clock()
        try:
            with open(am["password_file"]) as f:
                password = f.read().strip()
            ids = make_silences(am["url"], password, [name], now, now + self.settings.reboot_timeout_seconds + 300,
                                f"kiln-remediate {name}: {work}", "kiln-remediate", ca_file=am.get("ca_file"))
        except (OSError, KeyError, AlertmanagerError) as e:
            self.log("silence_failed", name, why=str(e)[:300])
            return
        self.log("silenced", name, ids=ids, work=work)

    def unsilence(self, name: str, after: bool = False) -> None:
        """End the node's silences that kiln-remediate made and has not ended (the journal has them): now,
        or ``after`` the config's ``grace_seconds`` (the alerts the repair's fault caused still resolving)."""
        am = self.config.get("alertmanager")
        events = read_journal(self.journal) if am else []
        ended = {i for e in events if e.get("event") == "unsilenced" for i in e.get("ids", [])}
        ids = [i for e in events if e.get("event") == "silenced" and e.get("node") == name
               for i in e.get("ids", []) if i not in ended]
        if not ids:
            return
        try:
            with open(am["password_file"]) as f:
                expire_silences(am["url"], f.read().strip(), ids, after=am.get("grace_seconds", 0) if after else 0,
                                ca_file=am.get("ca_file"))
        except (OSError, KeyError, AlertmanagerError) as e:
            self.log("silence_failed", name, why=f"not ended, it ends with its window: {e}"[:300])
            return
        self.log("unsilenced", name, ids=ids)

    def verify(self, name: str, d: Decision, before: list[str] | None) -> None:
        for attempt in range(3):  # a restarted slurmd takes a few seconds to register
            passed, after = self.check(name)
            if passed:
                break
            time.sleep(10 if attempt < 2 and not self.config.get("fast") else 0)
        result, other = judge(d.check, passed, after)
        self.log("result", name, step=d.step, result=result, before=before, after=after)
        if passed:
            self.resume(name)
        elif other:
            self.log("closed", name, why=f"{d.check} passes after {d.step}; the node fails {other} now")
            self.log("fault", name, check=other, reason="; ".join(after)[:200], drained_at=None)

    def resume(self, name: str) -> None:
        """Back into service, unless Slurm has done it already (a node that was down returns by itself
        once slurmd registers: ReturnToService=2)."""
        sep = separator()
        shown, _ = sinfo.read_nodes(self._run(sinfo.nodes_command(sep, [name])).stdout, sep)
        now = shown[name].state if name in shown else ""
        if now and not NodeView(name, now).out_of_service:
            self.log("resumed", name, rc=0, detail=f"already {now} in Slurm")
            self.unsilence(name, after=True)
            return
        done = self.scontrol("update", f"nodename={name}", "state=resume")
        self.log("resumed", name, rc=done.returncode, detail=(done.stderr or done.stdout).strip()[:200])
        self.unsilence(name, after=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kiln-remediate", description=__doc__.splitlines()[0])
    ap.add_argument("--once", action="store_true", help="one look, then exit")
    ap.add_argument("--dry-run", action="store_true", help="say what would be done; do nothing, write nothing")
    ap.add_argument("--json", action="store_true", help="the decisions as JSON")
    ap.add_argument("--reset-breaker", action="store_true", help="close the circuit breaker (a person's call)")
    ap.add_argument("--config", default=CONFIG)
    args = ap.parse_args(argv)
    with open(args.config) as f:
        config = json.load(f)
    lock = os.open(config.get("lock", LOCK), os.O_CREAT | os.O_RDWR, 0o600)
    quiet = args.json
    say = (lambda *a: print(*a, file=sys.stderr)) if quiet else print
    while True:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the service and a person's --once take turns
        try:
            r = Remediator(config, dry_run=args.dry_run, out=say)
            if args.reset_breaker:
                r.log("breaker_reset", why="reset by a person")
                say("circuit breaker closed")
                return 0
            try:
                decisions = r.look()
            except RuntimeError as e:
                say(f"kiln-remediate: {e}")
                decisions = None
            if not args.dry_run:
                write_metrics(config.get("textfile_dir", ""), metrics(read_journal(r.journal), time.time()))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
        if args.once or args.dry_run:
            if args.json:
                print(json.dumps({"decisions": decisions or []}, indent=1))
            return 0 if decisions is not None else 1
        time.sleep(int(config.get("settings", {}).get("interval_seconds", 30)))


if __name__ == "__main__":
    sys.exit(main())

"""The service nodes of a rollout (controller, database, login: one at a time, never drained) and what
a Slurm upgrade adds around them: the version window checked against what the cluster runs, the plan
put in SchedMD's order, the backup before a slurmdbd or slurmctld host is patched, SlurmdTimeout raised
and restored (kiln/patch/slurm_upgrade.py has the rules and commands). A part of Rollout
(kiln/patch/rollout.py), whose journal, options and collaborators it uses."""

from __future__ import annotations

import shlex
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import roles
from checks.parsers import scontrol
from kiln.patch import plan as planning

if TYPE_CHECKING:
    from kiln.patch.rollout import Outcome


class ServiceNodes:
    def poll(self) -> float:
        """Seconds between looks at a node coming back (the rollout's, which tests shorten)."""
        raise NotImplementedError
    def _slurm_upgrade(self, plan: planning.Plan) -> None:
        """A changed slurm pin: refused outside SchedMD's window (PlanError, nothing touched), else the
        plan put in SchedMD's order (kiln/patch/slurm_upgrade.py)."""
        from kiln.patch import slurm_upgrade as upgrade
        node = self.checker.node(self.cluster.hosts[self.cluster.controllers[0].name])
        try:
            controller = scontrol.read_version(node.run(shlex.join(scontrol.VERSION_COMMAND)).stdout)
        except ValueError as e:
            raise planning.PlanError(f"--roles slurm: {e}; nothing was touched") from None
        running = upgrade.Running(controller, upgrade.node_versions(node.run(shlex.join(scontrol.show_node_command())).stdout))
        target = self.cluster.versions["slurm"]
        problem = upgrade.refusal(running, target)
        if problem:
            raise planning.PlanError(problem)
        if not upgrade.is_upgrade(running, target):
            return
        dbd, controllers = upgrade.dbd_hosts(self.cluster), [h.name for h in self.cluster.controllers]
        plan.service, plan.service_after = upgrade.service_order(plan.service, dbd, controllers)
        timeouts = (self.cluster.setting("slurm_upgrade_slurmd_timeout"), self.cluster.setting("slurm_slurmd_timeout"))
        plan.slurm_upgrade = {"from": running.controller, "to": target, "dbd_hosts": dbd, "controllers": controllers,
                              "slurmd_timeout": list(timeouts),
                              "steps": upgrade.steps(plan.service, plan.compute, plan.service_after, dbd, controllers,
                                                     timeouts)}

    def _slurmd_timeout(self, seconds: int, phase: str, outcome: Outcome) -> bool:
        """SlurmdTimeout set to ``seconds`` on every Slurm host (the slurm role's configure stage, which
        ends in one scontrol reconfigure), once per rollout and phase. False (the rollout stops) if a host
        could not take it."""
        if any(r["event"] == "slurmd_timeout" and r["phase"] == phase for r in self.journal.records):
            return True
        hosts = [h for h in self.cluster.hosts if roles.for_host(self.cluster.hosts[h].roles, ["slurm"])]
        cluster = replace(self.cluster, settings=dict(self.cluster.settings, kiln_slurm_slurmd_timeout=seconds))
        self.say(f"SlurmdTimeout {phase} to {seconds} s on {len(hosts)} Slurm host(s)")
        failed = [h for h in self.configure(cluster, self.secrets, hosts, ["slurm"])
                  if h.status not in ("changed", "no change")]
        if failed:
            outcome.stopped = (f"SlurmdTimeout could not be {phase} to {seconds} s on "
                               + ", ".join(f"{h.name} ({h.status} at {h.failed_op!r})" for h in failed)
                               + ("; nothing of Slurm was upgraded" if phase == "raised" else
                                  "; set it back by hand: kiln deploy --roles slurm"))
            self.say(f"stopped: {outcome.stopped}")
            return False
        self.record("slurmd_timeout", phase=phase, seconds=seconds)
        return True

    def _service_node(self, name: str, outcome: Outcome, plan: planning.Plan | None = None) -> None:
        self.say(f"{name}: applying {', '.join(self.options.roles)} (service node, not drained)")
        upgrade = plan.slurm_upgrade if plan else {}
        if upgrade and not self.journal.done(name, "backup") and \
                (name in upgrade["dbd_hosts"] or name in upgrade["controllers"]):
            from kiln.patch.slurm_upgrade import backup_commands
            self.begin(name, "backup")
            script = " && ".join(backup_commands(self.rollout_id, name in upgrade["dbd_hosts"],
                                                 name in upgrade["controllers"]))
            out = self.checker.node(self.cluster.hosts[name]).run(script)
            if out.rc != 0:
                self.finish(name, "failed", f"backup before the Slurm upgrade failed (exit {out.rc}): "
                            f"{(out.stderr or out.stdout).strip()[-300:]}; nothing of Slurm was upgraded", outcome)
                return
            self.done(name, "backup")
        if not self.journal.done(name, "apply"):
            self.begin(name, "apply", roles=self.options.roles)
            (h,) = self.apply(self.cluster, self.secrets, [name], self.options.apply_roles)
            if h.status not in ("changed", "no change"):
                self.finish(name, "failed", f"{h.status} at {h.failed_op!r}", outcome)
                return
            self.done(name, "apply", changed=len(h.changed), reboot_required=h.reboot_required)
        wants = self.options.reboot == "always" or (self.options.reboot == "needed" and
                                                    (self.journal.done(name, "apply") or {}).get("reboot_required"))
        if wants and not self.journal.done(name, "reboot"):
            self.maintenance.silence(name, [name])
            node = self.checker.node(self.cluster.hosts[name])
            boot_id = node.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()
            earlier = self.begin(name, "reboot", boot_id=boot_id)
            if not earlier or earlier.get("boot_id") == boot_id:
                node.run("systemctl reboot")
            deadline = time.monotonic() + self.options.boot_timeout
            while node.run("cat /proc/sys/kernel/random/boot_id").stdout.strip() in ("", boot_id):
                if time.monotonic() > deadline:
                    self.maintenance.unsilence(name)  # a node that did not come back alerts
                    self.finish(name, "failed", "did not come back from its reboot", outcome)
                    return
                time.sleep(self.poll())
            self.done(name, "reboot")
        failed = [v for v in self.check(self.cluster, [name]).get(name, []) if v.failed]
        self.maintenance.unsilence(name, 0 if failed else self.silence_grace)
        self.done(name, "check", failed=[v.id for v in failed])
        if failed:
            self.finish(name, "failed", f"{failed[0].id}: {failed[0].message}", outcome)
        else:
            self.finish(name, "patched", "", outcome)


"""The monitoring role's structured settings: Alertmanager receivers, the SMTP relay, alert thresholds.

Every value here lands in a YAML file Prometheus or Alertmanager reads (rendered as data, never
spliced as text) or in a rule's expression as a number: strict types only, so no value can add a
scrape job, a rule or a key.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from kiln.inventory.formats import EmailAddress, HostPort, Token, Url
from kiln.inventory.strict import Strict


class Receiver(Strict):
    """Where Alertmanager sends alerts: one webhook URL or one e-mail address per receiver."""

    name: Token = Field(description="the receiver's name in alertmanager.yml")
    webhook_url: Url | None = Field(None, description="POST every notification to this http(s) URL")
    email_to: EmailAddress | None = Field(None, description="send every notification to this address "
                                          "(needs kiln_monitoring_smtp)")
    send_resolved: bool = Field(True, description="also tell when an alert is resolved")

    @model_validator(mode="after")
    def _one_target(self) -> "Receiver":
        if (self.webhook_url is None) == (self.email_to is None):
            raise ValueError(f"receiver {self.name!r} needs exactly one of webhook_url and email_to")
        return self


class Smtp(Strict):
    """The mail relay Alertmanager sends e-mail through (no password: a relay that trusts the cluster)."""

    smarthost: HostPort = Field(description="the relay as HOST:PORT, e.g. smtp.example.org:25")
    sender: EmailAddress = Field(description="the From: address of alert mail")
    require_tls: bool = Field(True, description="refuse to send unless the relay offers STARTTLS")


class AlertThresholds(Strict):
    """The thresholds of kiln's alert rules (kiln/monitoring/alert_rules.py); each is a number or a number
    of seconds, so a value can change a comparison but never the rule."""

    node_down_seconds: int = Field(60, ge=0, le=86400, description="a scrape target down this long: "
                                   "KilnNodeDown, KilnExporterDown")
    gpu_temperature_celsius: int = Field(87, ge=40, le=120, description="KilnGPUTemperatureHigh above this")
    gpu_temperature_seconds: int = Field(300, ge=0, le=86400, description="... for this long")
    gpu_throttle_seconds: int = Field(300, ge=0, le=86400, description="a hardware or thermal clock event "
                                      "this long: KilnGPUThrottled")
    nvlink_errors_per_10m: int = Field(10, ge=0, le=10**9, description="NVLink CRC/replay/recovery errors in "
                                       "10 minutes above this: KilnNVLinkErrors")
    check_stale_seconds: int = Field(900, ge=60, le=86400, description="kiln's node checks (kiln.prom) not "
                                     "written for this long: KilnNodeChecksStale")
    drained_seconds: int = Field(60, ge=0, le=86400, description="a node drained by kiln's checks this long: "
                                 "KilnNodeDrainedByChecks")
    slurm_daemon_seconds: int = Field(60, ge=0, le=86400, description="slurmctld, slurmdbd or slurmd not "
                                      "answering this long")
    dbd_queue_messages: int = Field(500, ge=1, le=10**7, description="slurmctld's DBD agent queue above this "
                                    "(slurmdbd or its database not keeping up): KilnSlurmDBDQueueGrowing")
    dbd_queue_seconds: int = Field(600, ge=0, le=86400, description="... for this long")
    team_gpu_limit_pending_seconds: int = Field(3600, ge=0, le=30 * 86400, description="a team's jobs pending "
                                                "on its GPU limit this long: KilnTeamAtGPULimit")
    disk_free_percent: int = Field(10, ge=1, le=99, description="a local filesystem with less free space than "
                                   "this share: KilnDiskAlmostFull")
    disk_free_seconds: int = Field(300, ge=0, le=86400, description="... for this long")
    certificate_days: int = Field(14, ge=1, le=365, description="a listener's TLS certificate of the cluster's CA "
                                  "expiring within this many days (kiln deploy renews it earlier): "
                                  "KilnCertificateExpiresSoon")


class Alerting(Strict):
    """How alerts are grouped and repeated by Alertmanager."""

    group_wait_seconds: int = Field(30, ge=0, le=3600, description="wait before the first notification of a group")
    group_interval_seconds: int = Field(300, ge=1, le=86400, description="between notifications of a changed group")
    repeat_interval_seconds: int = Field(4 * 3600, ge=60, le=30 * 86400, description="repeat an unchanged firing "
                                         "group")


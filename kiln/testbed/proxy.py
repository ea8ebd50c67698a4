"""apt-cacher-ng on the host, so each package downloads once for all nodes.

Started by hand (the host may have no systemd), with its own config, cache, log and pid file under the
testbed's directories; stopped by its pid. A proxy that kiln did not start is never touched.
"""

from __future__ import annotations

import shutil
import time
import urllib.request
from pathlib import Path

from kiln.testbed.host import TestbedError, pid_alive, read_pid, run, stop_recorded

MARKER = "apt-cacher-ng"
SYSTEM_CONF = Path("/etc/apt-cacher-ng")


class AptProxy:
    def __init__(self, state: Path, cache: Path, address: str, port: int):
        self.dir = state / "apt-proxy"
        self.cache = cache
        self.address = address
        self.port = port

    @property
    def pidfile(self) -> Path:
        return self.dir / "apt-cacher-ng.pid"

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def running(self) -> bool:
        return pid_alive(read_pid(self.pidfile), MARKER)

    def start(self) -> None:
        if self.running():
            return
        self.stop()  # a stale pid file or half-started proxy from a crashed run
        conf = self.dir / "conf"
        shutil.rmtree(conf, ignore_errors=True)
        if not SYSTEM_CONF.is_dir():
            raise TestbedError("apt-cacher-ng is not installed: apt-get install apt-cacher-ng")
        shutil.copytree(SYSTEM_CONF, conf)
        # The package's default upstream list does not resolve everywhere; name Debian's own mirror.
        (conf / "backends_debian").write_text("http://deb.debian.org/debian/\n")
        (conf / "backends_debian_security").write_text("http://deb.debian.org/debian-security/\n")
        (self.dir / "log").mkdir(parents=True, exist_ok=True)
        self.cache.mkdir(parents=True, exist_ok=True)
        if _user_exists("apt-cacher-ng"):  # the package's user; the daemon drops to it
            for d in (self.cache, self.dir / "log"):
                shutil.chown(d, "apt-cacher-ng", "apt-cacher-ng")
        run(["apt-cacher-ng", "-c", str(conf), "ForeGround=0", f"PidFile={self.pidfile}",
             f"CacheDir={self.cache}", f"LogDir={self.dir / 'log'}", f"Port={self.port}",
             f"BindAddress=127.0.0.1 {self.address}", "ExThreshold=4", "ReuseConnections=1",
             # Index files fetched in the last 10 minutes count as fresh: many nodes running
             # `apt-get update` at once are answered from the cache instead of each re-validating the
             # same InRelease upstream at the same moment.
             "FreshIndexMaxAge=600"])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.running() and self._answers():
                return
            time.sleep(0.2)
        raise TestbedError(f"apt-cacher-ng did not start on {self.url}; see {self.dir / 'log'}")

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/acng-report.html", timeout=2).read(64)
            return True
        except OSError as exc:
            return "HTTP Error" in str(exc)

    def stop(self) -> None:
        stop_recorded(self.pidfile, MARKER)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False

"""InfiniBand / RoCE: ``ibstat``, ``ibv_devinfo`` and ``ib_write_bw`` output."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checks.verdict import CheckError, UnknownFormat


@dataclass
class Port:
    number: int
    state: str = ""           # Active, Down, Initializing, Armed (ibstat) / PORT_ACTIVE (ibv_devinfo)
    physical_state: str = ""  # LinkUp, Polling, Disabled ...
    rate: float | None = None  # Gb/s
    link_layer: str = ""      # InfiniBand | Ethernet

    @property
    def active(self) -> bool:
        return self.state.upper() in ("ACTIVE", "PORT_ACTIVE")

    @property
    def link_up(self) -> bool | None:
        """Physical link up; None when the tool did not say (ibv_devinfo without -v)."""
        if not self.physical_state:
            return None
        return self.physical_state in ("LinkUp", "LINK_UP")


@dataclass
class Adapter:
    name: str
    ports: dict[int, Port] = field(default_factory=dict)


# ibstat's own keys: an adapter's before its first port, a port's after its "Port N:" line. Read by key,
# not by indentation, so a capture whose tabs were lost (pasted into a ticket, a log shipper that
# strips them) reads the same; a key ibstat does not print is not guessed at.
_ADAPTER_KEYS = ("CA type", "Number of ports", "Firmware version", "Hardware version", "Node GUID",
                 "System image GUID")
_PORT_KEYS = ("State", "Physical state", "Rate", "Base lid", "LMC", "SM lid", "Capability mask", "Port GUID",
              "Link layer")


def parse_ibstat(text: str) -> dict[str, Adapter]:
    """``ibstat`` (all adapters): name -> Adapter with its ports. Indentation is not needed. Refused
    (CheckError), never passed: output that is not ibstat's, a port cut short (no State line), and
    an adapter listing fewer ports than its "Number of ports" (ibstat prints every port)."""
    adapters: dict[str, Adapter] = {}
    declared: dict[str, int] = {}
    adapter = port = None
    for line in text.splitlines():
        if line.startswith("ibpanic:"):
            raise CheckError(f"ibstat failed: {line.strip()}")
        ca = re.match(r"^\s*CA '([^']+)'", line)
        if ca:
            adapter = adapters.setdefault(ca.group(1), Adapter(ca.group(1)))
            port = None
            continue
        if adapter is None:
            if line.strip():
                raise CheckError(f"ibstat output does not start with an adapter: {line[:80]!r}")
            continue
        p = re.match(r"^\s*Port (\d+):\s*$", line)
        if p:
            port = adapter.ports.setdefault(int(p.group(1)), Port(int(p.group(1))))
            continue
        kv = re.match(r"^\s*([^:]+?):\s*(.*)$", line)  # tabs from ibstat; spaces, or nothing, where a log copied it
        if not kv:
            if line.strip():
                raise CheckError(f"ibstat line not understood under {adapter.name}: {line[:80]!r}")
            continue
        key, value = kv.group(1).strip(), kv.group(2).strip()
        if key in _ADAPTER_KEYS and port is None:
            if key == "Number of ports" and re.fullmatch(r"\d+", value, re.ASCII):
                declared[adapter.name] = int(value)
        elif key in _PORT_KEYS and port is not None:
            if key == "State":
                port.state = value
            elif key == "Physical state":
                port.physical_state = value
            elif key == "Rate":
                port.rate = float(value) if re.fullmatch(r"\d+(\.\d+)?", value, re.ASCII) else None
            elif key == "Link layer":
                port.link_layer = value
    if not adapters:
        raise CheckError("ibstat listed no adapter")
    for a in adapters.values():
        if not a.ports or len(a.ports) < declared.get(a.name, 1):
            raise CheckError(f"ibstat output for {a.name} lists {len(a.ports)} port(s) of "
                             f"{declared.get(a.name, 'at least 1')}: not ibstat's full output, not read")
        for p in a.ports.values():
            if not p.state:
                raise CheckError(f"ibstat output for {a.name} port {p.number} is cut short (no State line)")
    return adapters


_SPEEDS = {"2.5 Gbps": 2.5, "5.0 Gbps": 5, "10.0 Gbps": 10, "14.0 Gbps": 14, "25.0 Gbps": 25, "50.0 Gbps": 50,
           "100.0 Gbps": 100, "200.0 Gbps": 200}


def parse_ibv_devinfo(text: str) -> dict[str, Adapter]:
    """``ibv_devinfo [-v]``: name -> Adapter; rate from active_width x active_speed when -v gave them."""
    adapters: dict[str, Adapter] = {}
    adapter = port = None
    width = speed = None
    for line in text.splitlines():
        hca = re.match(r"^hca_id:\s*(\S+)", line)
        if hca:
            adapter = adapters.setdefault(hca.group(1), Adapter(hca.group(1)))
            port = None
            continue
        p = re.match(r"^\s+port:\s*(\d+)", line)
        if p and adapter is not None:
            port = adapter.ports.setdefault(int(p.group(1)), Port(int(p.group(1))))
            width = speed = None
            continue
        kv = re.match(r"^\s+(\w+):\s*(.*)$", line)
        if kv and port is not None:
            key, value = kv.group(1), kv.group(2).strip()
            if key == "state":
                port.state = value.split()[0]
            elif key == "phys_state":
                port.physical_state = value.split()[0]
            elif key == "link_layer":
                port.link_layer = value
            elif key == "active_width":
                width = int(re.match(r"(\d+)", value).group(1)) if re.match(r"\d+", value) else None
            elif key == "active_speed":
                gbps = re.match(r"([\d.]+) Gbps", value)
                speed = float(gbps.group(1)) if gbps else None
            if width and speed:
                port.rate = width * speed
    if not adapters:
        raise CheckError("ibv_devinfo listed no adapter")
    return adapters


MIB_PER_SECOND_IN_GBITS = 1048576 * 8 / 1e9  # perftest's "MB/sec" and "MiB/sec": 2^20 bytes a second


def parse_ib_write_bw(text: str) -> dict[int, float]:
    """``ib_write_bw`` result rows: message size (bytes) -> average bandwidth in Gb/s, one direction.
    Without --report_gbits perftest reports 2^20 bytes a second (its format factor 0x100000), labelled
    ``MB/sec`` by older releases and ``MiB/sec`` by newer ones (Debian 13's 25.01): both are read as
    MiB; ``Gb/sec`` is 10^9 bits. A size printed more than once (one row per port of a two-port run)
    keeps its lowest figure: the slow port is the one to report. A bidirectional run (``-b``:
    "Bidirectional BW Test") reports both directions added up: halved, so the figure compares with a
    link's rate. Older perftest prints four columns (no MsgRate)."""
    unit = None
    both_ways = "Bidirectional BW Test" in text
    results: dict[int, float] = {}
    figureless: list[str] = []
    for line in text.splitlines():
        header = re.search(r"BW average\[(Gb/sec|MB/sec|MiB/sec)\]", line)
        if header:
            unit = header.group(1)
            continue
        # perftest may glue a warning to the row ("0.000000Correlation coefficient r^2: 0.67 < 0.9")
        row = re.match(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)(?:\s+[\d.]+)?", line, re.ASCII)
        if unit and not row and re.match(r"^\s*\d+\s+\d+\s+\S+\s+\S+", line, re.ASCII):
            figureless.append(line.strip()[:80])  # "65536 200 inf -nan": a run whose clock failed it
        if row and unit:
            average = float(row.group(4))
            gbits = average if unit == "Gb/sec" else average * MIB_PER_SECOND_IN_GBITS
            if both_ways:
                gbits /= 2
            size = int(row.group(1))
            results[size] = min(gbits, results.get(size, gbits))
    if not results:
        if unit is None and re.search(r"#bytes\s+#iterations", text):
            raise UnknownFormat("ib_write_bw's result header names no BW average unit kiln reads: not read")
        if figureless:
            raise CheckError(f"ib_write_bw printed a result row with no figure ({figureless[0]!r})")
        raise CheckError("ib_write_bw printed no result row (did the peer connect?)")
    return results

"""A node's BMC over Redfish (DMTF DSP0266): its power state and a power cycle, for kiln-remediate's
out-of-band step (a node that answers nothing is not a daemon to restart).

What it asks, and nothing more:

- ``GET /redfish/v1/Systems``: the collection; the node's system is its one member (a BMC with several
  must be given the member's path);
- ``GET <system>``: ``PowerState`` (On, Off, PoweringOn, PoweringOff, Paused) and the
  ``#ComputerSystem.Reset`` action's target and ``ResetType@Redfish.AllowableValues``;
- ``POST <target>`` with ``{"ResetType": ...}``: PowerCycle where the BMC offers it, else ForceRestart;
  On for a system that is off. A reset type the BMC does not list is never sent.

HTTPS only, with basic auth. A BMC's certificate is usually its own (self-signed): it is trusted through a
CA file the operator gives, or pinned by its SHA-256 fingerprint, compared before the credentials are
sent; there is no "do not verify". Every failure is a ``RedfishError`` naming the BMC and what to do.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import socket
import ssl

FINGERPRINT = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){31}$")
POWER_STATES = ("On", "Off", "PoweringOn", "PoweringOff", "Paused")
RESET = "#ComputerSystem.Reset"


class RedfishError(Exception):
    pass


def host_and_port(address: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` as (host, port); 443 unless given."""
    found = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\](?::(\d{1,5}))?|([A-Za-z0-9._-]+)(?::(\d{1,5}))?|([0-9A-Fa-f:]+)", address)
    if not found:
        raise RedfishError(f"BMC address {address!r} is not host, host:port or [IPv6]:port")
    v6, v6_port, host, port, bare_v6 = found.groups()
    if not 0 < int(v6_port or port or 443) < 65536:
        raise RedfishError(f"BMC address {address!r} is not host, host:port or [IPv6]:port (port 1-65535)")
    return (v6 or host or bare_v6), int(v6_port or port or 443)


def fingerprint_of(der: bytes) -> str:
    """A certificate's SHA-256 fingerprint as openssl prints it (lower case, colon separated)."""
    return ":".join(f"{b:02x}" for b in hashlib.sha256(der).digest())


class Redfish:
    """One BMC. ``address``: host or host:port; ``ca_file`` or ``fingerprint`` (SHA-256, ``ab:cd:...``):
    how its certificate is trusted (one of them); ``system``: the system's path where the BMC has several."""

    def __init__(self, address: str, user: str, password: str, *, ca_file: str | None = None,
                 fingerprint: str | None = None, system: str | None = None, timeout: float = 15.0):
        if bool(ca_file) == bool(fingerprint):
            raise RedfishError(f"BMC {address}: give its certificate's CA file or its SHA-256 fingerprint (one)")
        if fingerprint and not FINGERPRINT.match(fingerprint.lower()):
            raise RedfishError(f"BMC {address}: fingerprint {fingerprint!r} is not a SHA-256 fingerprint "
                               "(32 hex pairs separated by ':', as openssl x509 -fingerprint -sha256 prints)")
        self.address, self.user, self.password, self.timeout = address, user, password, timeout
        self.ca_file, self.fingerprint = ca_file, fingerprint.lower() if fingerprint else None
        self.system_path = system

    def _connection(self) -> http.client.HTTPSConnection:
        host, port = host_and_port(self.address)
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else ssl.create_default_context()
        if self.fingerprint:  # the pin stands in for the chain and the name; checked below before any request
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn = http.client.HTTPSConnection(host, port, timeout=self.timeout, context=context)
        try:
            conn.connect()
        except ssl.SSLCertVerificationError as e:
            raise RedfishError(f"BMC {self.address}: its certificate is not trusted ({e.verify_message}): give the "
                               "CA that signed it, or pin its fingerprint") from None
        except (OSError, socket.timeout) as e:
            raise RedfishError(f"BMC {self.address} did not answer ({e}): is the management network reachable "
                               "from here, and the BMC powered?") from None
        if self.fingerprint:
            seen = fingerprint_of(conn.sock.getpeercert(binary_form=True))
            if seen != self.fingerprint:
                conn.close()
                raise RedfishError(f"BMC {self.address}: its certificate's fingerprint is {seen}, not the pinned "
                                   f"{self.fingerprint}: nothing was sent; find out why it changed before pinning it")
        return conn

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        if not path.startswith("/redfish/v1"):
            raise RedfishError(f"BMC {self.address}: {path!r} is not a Redfish path")
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        headers = {"Authorization": f"Basic {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        conn = self._connection()
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            text = response.read(4 << 20)
        except (OSError, http.client.HTTPException) as e:
            raise RedfishError(f"BMC {self.address}: {method} {path} broke off ({e})") from None
        finally:
            conn.close()
        if response.status in (401, 403):
            raise RedfishError(f"BMC {self.address} refused the credentials (HTTP {response.status}): check the user "
                               "and the password in kiln's secrets")
        if response.status >= 300:
            raise RedfishError(f"BMC {self.address}: {method} {path} answered HTTP {response.status} "
                               f"({_message(text)})")
        if not text.strip():
            return {}
        try:
            answer = json.loads(text)
        except ValueError:
            raise RedfishError(f"BMC {self.address}: {method} {path} answered something that is not JSON") from None
        if not isinstance(answer, dict):
            raise RedfishError(f"BMC {self.address}: {method} {path} answered JSON that is not an object")
        return answer

    def system(self) -> dict:
        """The node's ComputerSystem resource."""
        if not self.system_path:
            members = self._call("GET", "/redfish/v1/Systems").get("Members")
            paths = [m.get("@odata.id") for m in members if isinstance(m, dict)] if isinstance(members, list) else []
            if len(paths) != 1 or not isinstance(paths[0], str):
                raise RedfishError(f"BMC {self.address} lists {len(paths)} systems: name the node's in the inventory")
            self.system_path = paths[0]
        return self._call("GET", self.system_path)

    def power_state(self) -> str:
        state = self.system().get("PowerState")
        if state not in POWER_STATES:
            raise RedfishError(f"BMC {self.address}: PowerState {state!r} is not one of Redfish's")
        return state

    def power_cycle(self) -> str:
        """Power the node off and on (on, when it is off); the reset type sent."""
        system = self.system()
        state = system.get("PowerState")
        action = (system.get("Actions") or {}).get(RESET)
        if not isinstance(action, dict) or not isinstance(action.get("target"), str):
            raise RedfishError(f"BMC {self.address}: the system offers no {RESET} action")
        allowed = action.get("ResetType@Redfish.AllowableValues")
        wanted = ("On",) if state == "Off" else ("PowerCycle", "ForceRestart")
        offered = [w for w in wanted if not isinstance(allowed, list) or w in allowed]
        if not offered:
            raise RedfishError(f"BMC {self.address}: the system is {state} and offers none of {', '.join(wanted)} "
                               f"(it offers {', '.join(map(str, allowed))})")
        self._call("POST", action["target"], {"ResetType": offered[0]})
        return offered[0]


def bmc_password(password_file: str, bmc: object, error: type[Exception]) -> str:
    """The BMCs' password (the first line of ``password_file``), or ``error`` saying where it comes from."""
    try:
        with open(password_file) as f:
            return f.readline().strip()
    except OSError as e:
        raise error(f"BMC {bmc}: cannot read its password ({e.strerror}): kiln deploy places it from kiln's "
                    "secrets (bmc.password)") from None


def power_cycle_node(bmc: dict, password_file: str) -> str:
    """Power-cycle a node by its BMC as kiln-remediate's configuration names it (``address``, ``user``,
    ``fingerprint`` or ``ca_file``, ``system``; the password in ``password_file``): the reset type sent."""
    password = bmc_password(password_file, bmc.get("address"), RedfishError)
    return Redfish(bmc["address"], bmc["user"], password, ca_file=bmc.get("ca_file"),
                   fingerprint=bmc.get("fingerprint"), system=bmc.get("system")).power_cycle()


def _message(text: bytes) -> str:
    """The first message of a Redfish error body, or its start."""
    try:
        error = json.loads(text).get("error", {})
        extended = error.get("@Message.ExtendedInfo") or [{}]
        return str(extended[0].get("Message") or error.get("message") or "")[:200]
    except (ValueError, AttributeError, IndexError, TypeError):
        return text[:200].decode(errors="replace").strip()

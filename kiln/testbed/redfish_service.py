"""The testbed's own Redfish endpoint: a BMC for nodes that have none (containers, QEMU VMs), serving the part of
DMTF Redfish kiln uses (checks/redfish.py) in the shapes real BMCs and DMTF's mockups use, over HTTPS with
basic auth. It belongs to the testbed and is never called GPU or hardware proof.

- ``GET /redfish/v1`` (service root), ``/redfish/v1/Systems`` (one member per node), ``/redfish/v1/Systems/NODE``
  (``PowerState``, the ``#ComputerSystem.Reset`` action and its allowable reset types);
- ``POST .../Actions/ComputerSystem.Reset`` with ``ResetType`` On, ForceOff, GracefulShutdown, ForceRestart
  or PowerCycle. What a BMC refuses it refuses: a reset type it does not list (HTTP 400,
  ``ActionParameterNotSupported``), a body without one (400, ``ActionParameterMissing``), wrong
  credentials (401), an unknown system (404). A reset is answered at once (204) and carried out after, as
  BMCs do: the node's power is the backend's.

``Power`` is the backend: ``state(node)`` ("On"/"Off"), ``on(node)``, ``off(node)``.
"""

from __future__ import annotations

import base64
import hmac
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

RESET_TYPES = ["On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"]
SYSTEM_TYPE = "#ComputerSystem.v1_13_0.ComputerSystem"


class Power(Protocol):
    def state(self, node: str) -> str: ...
    def on(self, node: str) -> None: ...
    def off(self, node: str) -> None: ...


def _error(code: str, message: str) -> dict:
    """A Redfish error body (DSP0266 9.6: error with @Message.ExtendedInfo)."""
    return {"error": {"code": f"Base.1.8.{code}", "message": message,
                      "@Message.ExtendedInfo": [{"MessageId": f"Base.1.8.{code}", "Message": message}]}}


class RedfishService:
    """Serves ``nodes`` on ``host``:``port`` (0: any free port) with the certificate in ``cert_file`` and
    ``key_file``; ``user``/``password``: the basic-auth credentials it takes."""

    def __init__(self, nodes: list[str], power: Power, user: str, password: str, cert_file: str, key_file: str,
                 host: str = "127.0.0.1", port: int = 0, reset_types: list[str] = RESET_TYPES,
                 log=lambda line: None):
        """``reset_types``: the ones the BMC lists and takes (some offer no PowerCycle); ``log``: told of
        each reset and its end."""
        self.nodes, self.power, self.reset_types, self.log = list(nodes), power, list(reset_types), log
        self.resets: list[tuple[str, str]] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request that reached it
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._auth = f"Basic {token}"
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict | None = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                if data:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _allowed(self) -> bool:
                service.requests.append((self.command, self.path))
                if hmac.compare_digest(self.headers.get("Authorization", ""), service._auth):
                    return True
                self._send(401, _error("InsufficientPrivilege", "There are insufficient privileges for the "
                                       "account or credentials associated with the current session."))
                return False

            def do_GET(self):
                if not self._allowed():
                    return
                path = self.path.rstrip("/")
                if path == "/redfish/v1":
                    return self._send(200, {"@odata.id": "/redfish/v1", "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
                                            "Id": "RootService", "RedfishVersion": "1.8.0",
                                            "Systems": {"@odata.id": "/redfish/v1/Systems"}})
                if path == "/redfish/v1/Systems":
                    return self._send(200, {"@odata.id": "/redfish/v1/Systems",
                                            "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
                                            "Members@odata.count": len(service.nodes),
                                            "Members": [{"@odata.id": f"/redfish/v1/Systems/{n}"} for n in service.nodes]})
                node = path.removeprefix("/redfish/v1/Systems/")
                if node in service.nodes:
                    return self._send(200, service.system(node))
                self._send(404, _error("ResourceMissingAtURI", f"The resource at the URI {self.path} was not found."))

            def do_POST(self):
                if not self._allowed():
                    return
                node = self.path.removeprefix("/redfish/v1/Systems/").removesuffix("/Actions/ComputerSystem.Reset")
                if not self.path.endswith("/Actions/ComputerSystem.Reset") or node not in service.nodes:
                    return self._send(404, _error("ResourceMissingAtURI", f"The resource at the URI {self.path} was "
                                                  "not found."))
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                except ValueError:
                    return self._send(400, _error("MalformedJSON", "The request body submitted was malformed JSON."))
                kind = body.get("ResetType") if isinstance(body, dict) else None
                if kind is None:
                    return self._send(400, _error("ActionParameterMissing", "The action ComputerSystem.Reset requires "
                                                  "the parameter ResetType to be present in the request body."))
                if kind not in service.reset_types:
                    return self._send(400, _error("ActionParameterNotSupported", f"The parameter ResetType for the "
                                                  f"action ComputerSystem.Reset is not supported on the target "
                                                  f"resource (value {kind!r})."))
                service.resets.append((node, kind))
                self._send(204)
                threading.Thread(target=service.reset, args=(node, kind), daemon=True).start()

        self.server = ThreadingHTTPServer((host, port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.address = f"{host}:{self.server.server_address[1]}"
        self._thread: threading.Thread | None = None

    def system(self, node: str) -> dict:
        return {"@odata.id": f"/redfish/v1/Systems/{node}", "@odata.type": SYSTEM_TYPE, "Id": node, "Name": node,
                "PowerState": self.power.state(node),
                "Actions": {"#ComputerSystem.Reset": {
                    "target": f"/redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset",
                    "ResetType@Redfish.AllowableValues": self.reset_types}}}

    def reset(self, node: str, kind: str) -> None:
        """Carry out a reset the service answered: off first for the ones that cycle, then on."""
        self.log(f"{node}: {kind}")
        try:
            if kind in ("ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle") and self.power.state(node) == "On":
                self.power.off(node)
            if kind in ("On", "ForceRestart", "PowerCycle") and self.power.state(node) == "Off":
                self.power.on(node)
        except Exception as e:  # a BMC outlives what its system does; the failure is logged
            self.log(f"{node}: {kind} failed: {e}")
            return
        self.log(f"{node}: {kind} done, power {self.power.state(node)}")

    def start(self) -> "RedfishService":
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

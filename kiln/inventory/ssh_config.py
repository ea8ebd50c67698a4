"""The ssh_config an inventory names (``kiln_ssh_config_file``) is read by ssh and paramiko on the
operator's machine: an option there can run a command or load a library on it (ProxyCommand,
LocalCommand, ``Match exec``, KnownHostsCommand, PKCS11Provider, or another file through Include). kiln
uses such a file only when every option in it is on a list of options that say how to reach a node
and nothing else; ProxyJump reaches nodes behind a bastion. Pure: text in, problems out."""

from __future__ import annotations

import re

# Options that choose where and how ssh connects, and never run or load anything on this machine.
SAFE_OPTIONS = frozenset(o.lower() for o in (
    "Host", "HostName", "User", "Port", "IdentityFile", "IdentitiesOnly", "CertificateFile", "UserKnownHostsFile",
    "GlobalKnownHostsFile", "StrictHostKeyChecking", "HostKeyAlias", "CheckHostIP", "HostKeyAlgorithms",
    "PubkeyAcceptedAlgorithms", "PubkeyAcceptedKeyTypes", "CASignatureAlgorithms", "Ciphers", "MACs",
    "KexAlgorithms", "ControlMaster", "ControlPath", "ControlPersist", "ConnectTimeout", "ConnectionAttempts",
    "ServerAliveInterval", "ServerAliveCountMax", "TCPKeepAlive", "LogLevel", "BatchMode", "Compression",
    "AddressFamily", "BindAddress", "BindInterface", "IPQoS", "PreferredAuthentications",
    "PubkeyAuthentication", "PasswordAuthentication", "KbdInteractiveAuthentication", "GSSAPIAuthentication",
    "ProxyJump", "UpdateHostKeys", "VerifyHostKeyDNS", "HashKnownHosts", "RekeyLimit", "ForwardAgent",
    "ForwardX11", "ClearAllForwardings", "ExitOnForwardFailure", "RequestTTY", "NumberOfPasswordPrompts",
    "EscapeChar", "CanonicalizeHostname", "CanonicalDomains", "CanonicalizeMaxDots", "CanonicalizeFallbackLocal",
    "SendEnv", "SetEnv",
))
MAX_BYTES = 1024 * 1024
_WORD = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]*)\s*(?:=|\s|$)", re.ASCII)


def unsafe_options(text: str) -> list[tuple[int, str]]:
    """(line, option) of every option not in SAFE_OPTIONS, and of every line that is not an option."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        word = _WORD.match(line)
        name = word.group(1) if word else stripped.split()[0][:40]
        if not word or name.lower() not in SAFE_OPTIONS:
            found.append((number, name))
    return found


def problem(path: str) -> str | None:
    """Why the ssh_config at ``path`` is refused, or None. A file that is not there yet is no problem
    here (a testbed's inventory is written before its nodes and their ssh_config exist; ssh fails
    on it at connection time): kiln deploy and kiln check validate again before they connect."""
    import os
    import stat
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read the ssh_config {path}: {exc.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return f"the ssh_config {path} is not a regular file"
    if info.st_size > MAX_BYTES:
        return f"the ssh_config {path} is over {MAX_BYTES} bytes"
    with open(path, "rb") as f:
        try:
            text = f.read(MAX_BYTES + 1).decode("utf-8")
        except UnicodeDecodeError:
            return f"the ssh_config {path} is not UTF-8 text"
    bad = unsafe_options(text)
    if not bad:
        return None
    listed = ", ".join(f"{name} (line {line})" for line, name in bad[:5])
    return (f"the ssh_config {path} has options kiln does not use: {listed}. They can run a command or load "
            "code on this machine (ProxyCommand, LocalCommand, Match exec, Include, KnownHostsCommand, "
            "PKCS11Provider) or are not ssh's; reach nodes behind a bastion with ProxyJump")

"""The strict formats of inventory values: every value kiln reads is data of a known shape, never code.

Each format is a string type for the settings schema (``Annotated[str, ...]``) whose validator refuses
anything outside it with one sentence naming what was expected. The formats are chosen so that a value
can only ever fill its own field: no whitespace or control character where a value lands in a
one-line config entry (slurm.conf, fstab, chrony.conf, nccl.conf), nothing that starts with ``-``
where a value becomes a command's argument, and only the characters the real thing uses (host
names per RFC 1123, POSIX portable user names, package version characters, Slurm time strings).
Values still go through one shell quoting helper (``kiln.shell``) wherever they reach a shell: the
formats are the first wall, the quoting the second.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Annotated, Any, Callable

from pydantic import AfterValidator

# C0 and C1 control characters, DEL, and the Unicode line and paragraph separators: nothing kiln or
# ssh reads may hold one (a newline in a value would add a line of its own to a rendered file).
# The only variables kiln reads (and so renders); every other variable belongs to another tool and is
# never rendered, decrypted or reported.
KILN_PREFIX = "kiln_"
KILN_CONNECTION_VARS = frozenset({"ansible_host", "ansible_user", "ansible_port", "ansible_ssh_private_key_file",
                                  "ansible_become"})


def read_by_kiln(name: str) -> bool:
    return name.startswith(KILN_PREFIX) or name in KILN_CONNECTION_VARS


# Control characters, and the invisible ones that change how a line reads on a terminal or in a review:
# bidirectional overrides and isolates (a name that displays as another), zero-width characters.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$", re.ASCII)
# POSIX portable user names (the portable filename characters, never a leading '-'): users, groups,
# teams (Slurm accounts) and partitions.
POSIX_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$", re.ASCII)
# Slurm QoS names: sacctmgr keeps them in lower case, so kiln asks for lower case (compared as written)
QOS_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$", re.ASCII)
# GPU models, node features, HCA names, switch names, inventory group names
NAME_GLOB = re.compile(r"^[A-Za-z0-9@+._*?-][A-Za-z0-9@+._*?:-]{0,127}$", re.ASCII)
TOKEN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$", re.ASCII)
# NCCL_SOCKET_IFNAME: an optional ^ (exclude) or = (exact) and a comma-separated list of prefixes
IFNAME_LIST = re.compile(r"^[=^]?[A-Za-z0-9_][A-Za-z0-9_.:-]{0,14}(?:,[A-Za-z0-9_][A-Za-z0-9_.:-]{0,14})*$", re.ASCII)
# Package versions as Debian and RPM spell them (epoch:upstream-revision, ~ + . _)
VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+~:_-]{0,127}$", re.ASCII)
PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+._-]{0,127}$", re.ASCII)
# Slurm time limits: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds, or INFINITE/UNLIMITED
SLURM_TIME = re.compile(r"^(?:INFINITE|UNLIMITED|\d{1,7}|\d{1,7}:\d{1,2}|\d{1,5}:\d{1,2}:\d{1,2}"
                        r"|\d{1,4}-\d{1,2}(?::\d{1,2}(?::\d{1,2})?)?)$", re.ASCII)
# Paths kiln writes into files or hands to commands: no whitespace, quotes, '%', '#', ';' or '$'
PATH_CHARS = re.compile(r"^[A-Za-z0-9_./@+,=:~-]+$", re.ASCII)
# What is mounted: nfs01:/export, 10.0.0.1@o2ib:/lustre, mon1,mon2:/, tmpfs, user@host:/dir
MOUNT_SOURCE = re.compile(r"^[A-Za-z0-9_/\[][A-Za-z0-9_./@+,=:\[\]-]{0,1023}$", re.ASCII)
MOUNT_OPTIONS = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./@+,=:-]{0,1023}$", re.ASCII)
SYSCTL_KEY = re.compile(r"^[A-Za-z0-9_-]+(?:[./][A-Za-z0-9_:-]+)+$", re.ASCII)
SYSCTL_VALUE = re.compile(r"^[A-Za-z0-9_.,:/=+-]+(?: [A-Za-z0-9_.,:/=+-]+)*$", re.ASCII)
# One network interface name (the kernel's limit is 15 characters)
IFNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,14}$", re.ASCII)
# Who may mount an NFS export: a host name (wildcards * and ?), an address, a network ADDRESS/PREFIX, or
# @netgroup, as exports(5) spells them
EXPORT_CLIENT = re.compile(r"^(?:\*|@[A-Za-z0-9_.-]{1,64}|[A-Za-z0-9*?](?:[A-Za-z0-9*?.-]{0,252})"
                           r"|[0-9.]{7,15}/\d{1,2}|[0-9A-Fa-f:]{2,39}/\d{1,3})$", re.ASCII)
URL = re.compile(r"^https?://[A-Za-z0-9.-]+(?::\d{1,5})?(?:/[A-Za-z0-9_.~/%+@,=:{}-]*)?$", re.ASCII)
# An e-mail address as Alertmanager's receivers and From: header take it: a plain local part and a host name
EMAIL = re.compile(r"^[A-Za-z0-9_.+-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$", re.ASCII)
# HOST:PORT of an SMTP relay
HOST_PORT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?:\d{1,5}$", re.ASCII)
# A program and its arguments (kiln_check_kernel_log): words of plain characters, kiln quotes each
COMMAND_WORD = re.compile(r"^[A-Za-z0-9_./=:{}+,@-]+$", re.ASCII)

# Mount points that would shadow the operating system: never, nor anything below them
SYSTEM_TREES = ("/etc", "/usr", "/boot", "/proc", "/sys", "/dev", "/run", "/bin", "/sbin", "/lib", "/lib32",
                "/lib64", "/libx32")
# ... and these themselves (a filesystem below them is fine: /var/lib/docker on local NVMe)
# (/opt holds kiln's nccl-tests; /root holds root's ssh keys)
SYSTEM_DIRS = ("/", "/var", "/var/lib", "/var/log", "/var/cache", "/var/spool", "/root", "/opt")


def control_free(value: str) -> str:
    found = CONTROL.search(value)
    if found:
        raise ValueError(f"holds the control character {found.group()!r} (at {found.start()}): inventory values "
                         "are one line of text")
    return value


def _matching(what: str, pattern: re.Pattern, hint: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        control_free(value)
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {what}: {hint}")
        return value
    check.__name__ = f"check_{what.replace(' ', '_')}"
    return check


def _text(what: str, pattern: re.Pattern, hint: str) -> Any:
    return Annotated[str, AfterValidator(_matching(what, pattern, hint))]


def check_hostname(value: str) -> str:
    control_free(value)
    if len(value) > 253 or not HOSTNAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid host name: letters, digits and '-' in dot-separated labels "
                         "of at most 63 characters, not starting or ending with '-' (RFC 1123)")
    return value


def url_host(address: str) -> str:
    """An address as the host part of a URL or HOST:PORT: an IPv6 address in brackets, anything else as it is."""
    return f"[{address}]" if ":" in address else address


def ascii_digits(value: str) -> bool:
    """Digits 0-9 only: str.isdigit() is true for superscripts and other scripts' digits as well."""
    return value.isascii() and value.isdigit()


def check_address(value: str) -> str:
    """An IP address or a host name (ansible_host, NTP servers), in one canonical form: an IP address
    as Python writes it (IPv6 compressed, lower case). A name whose last label is all digits or hex
    (``010.0.0.1``, ``10.1``, ``167772161``, ``0x0a.0.0.1``) is refused: it is no host name (RFC 1123's
    top-level labels are not numeric), and the system resolver reads it as an address of its own
    (leading zeros as octal: 010.0.0.1 is 8.0.0.1)."""
    control_free(value)
    if "%" in value:
        raise ValueError(f"{value!r} carries an IPv6 zone (after '%'): kiln writes a node's address into SSH's "
                         "authorized_keys and known_hosts files and Slurm's, where a zone is no part of an address; "
                         "give the node a global or unique-local address")
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        pass
    else:
        mapped = getattr(ip, "ipv4_mapped", None)
        return str(mapped or ip)  # ::ffff:10.0.0.1 is 10.0.0.1 to sshd and to every resolver
    last = value.rstrip(".").rsplit(".", 1)[-1].lower()
    if ascii_digits(last) or (last.startswith("0x") and all(c in "0123456789abcdef" for c in last[2:])):
        raise ValueError(f"{value!r} is not an IP address as written (leading zeros, fewer than four parts, hex): "
                         "the system resolver would read it as another address (010.0.0.1 is 8.0.0.1); write "
                         "a.b.c.d in plain decimal")
    try:
        return check_hostname(value)
    except ValueError:
        raise ValueError(f"{value!r} is neither an IP address nor a host name (RFC 1123)") from None


def check_network(value: str) -> str:
    """An IP network in ADDRESS/PREFIX form with no host bits set (``10.0.0.0/24``, ``2001:db8::/32``), or
    one address (a /32 or /128), in the form Python writes it: what a firewall rule holds as its source."""
    control_free(value)
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as e:
        raise ValueError(f"{value!r} is not an IP network in ADDRESS/PREFIX form with no host bits set "
                         f"(10.0.0.0/24, 192.0.2.7/32, 2001:db8::/32): {e}") from None
    return str(network)


def canonical_address(value: str) -> str:
    """``value`` if it is an address in kiln's one form (check_address's: an IP address as Python writes
    it, no zone, or a plain host name), else ValueError: what kiln writes into authorized_keys ``from=``,
    known_hosts and other files is nothing else, whatever path the value took."""
    try:
        canonical = check_address(value) if isinstance(value, str) else None
    except ValueError as e:
        raise ValueError(f"{value!r} is not an address in kiln's canonical form: {e}") from None
    if canonical != value or any(c in value for c in ',*?!"[]% '):
        raise ValueError(f"{value!r} is not an address in kiln's canonical form")
    return value


def is_this_machine(address: str) -> bool:
    """A loopback or unspecified address, IPv4-mapped ones too, or a name the resolver keeps on this
    machine (localhost, *.localhost)."""
    name = address.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or ip.is_unspecified or bool(mapped and (mapped.is_loopback or mapped.is_unspecified))


def check_mount_point(value: str) -> str:
    control_free(value)
    if not value.startswith("/"):
        raise ValueError(f"mount point {value!r} is relative: give an absolute path such as /{value}")
    if not PATH_CHARS.fullmatch(value):
        raise ValueError(f"mount point {value!r} may hold only letters, digits and _ . / @ + , = : ~ -")
    if posixpath.normpath(value) != value or "//" in value:
        raise ValueError(f"mount point {value!r} is not normalised: write {posixpath.normpath(value)}")
    if value in SYSTEM_DIRS or any(value == t or value.startswith(t + "/") for t in SYSTEM_TREES):
        raise ValueError(f"mount point {value!r} is a system directory: a filesystem mounted there would hide "
                         "the operating system's own files")
    return value


def check_path(value: str) -> str:
    """A file path kiln hands to a program (known_hosts, ssh key, topology XML): plain characters only."""
    control_free(value)
    if not PATH_CHARS.fullmatch(value) or value.startswith("-"):
        raise ValueError(f"path {value!r} may hold only letters, digits and _ . / @ + , = : ~ - (and not start "
                         "with '-')")
    return value


def check_absolute_path(value: str) -> str:
    check_path(value)
    if not value.startswith("/") or posixpath.normpath(value) != value:
        raise ValueError(f"{value!r} must be an absolute, normalised path")
    return value


def check_url(value: str) -> str:
    control_free(value)
    if not URL.fullmatch(value):
        raise ValueError(f"{value!r} is not an http(s) URL of plain characters (host, optional port and path; no "
                         "spaces, quotes or user:password@)")
    return value


def check_command(value: str) -> str:
    """A program with arguments, as words: kiln quotes every word, no shell ever reads the text as is."""
    control_free(value)
    words = value.split(" ")
    if not value or any(not COMMAND_WORD.fullmatch(w) for w in words) or words[0].startswith("-"):
        raise ValueError(f"{value!r} must be a program and its arguments separated by single spaces, each of "
                         "letters, digits and _ . / = : { } + , @ - (no shell syntax: kiln quotes every word)")
    return value


def check_sysctl_value(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"sysctl value {value!r} must be a number or a string")
    if isinstance(value, str):
        control_free(value)
        if not SYSCTL_VALUE.fullmatch(value):
            raise ValueError(f"sysctl value {value!r} may hold only letters, digits, _ . , : / = + - and single "
                             "spaces between words")
    return value


# A login name (ansible_user): the POSIX portable user-name set
check_user = _matching("user name", POSIX_NAME, "a letter or '_' first, then letters, digits, '_', '.', '-' "
                       "(at most 32)")

Address = Annotated[str, AfterValidator(check_address)]
Network = Annotated[str, AfterValidator(check_network)]
MountPoint = Annotated[str, AfterValidator(check_mount_point)]
FilePath = Annotated[str, AfterValidator(check_path)]

# a team's quota, in gluster volume quota's own units (KB, MB, GB, TB, PB: powers of 1024), a whole number
QUOTA_SIZE = re.compile(r"^[1-9][0-9]{0,8}(KB|MB|GB|TB|PB)$", re.ASCII)


def check_quota_size(value: str) -> str:
    if not isinstance(value, str) or not QUOTA_SIZE.match(value):
        raise ValueError(f"{value!r} is not a quota: a whole number and KB, MB, GB, TB or PB (e.g. 500GB)")
    return value


QuotaSize = Annotated[str, AfterValidator(check_quota_size)]
AbsolutePath = Annotated[str, AfterValidator(check_absolute_path)]
Url = Annotated[str, AfterValidator(check_url)]
Command = Annotated[str, AfterValidator(check_command)]
SysctlValue = Annotated[Any, AfterValidator(check_sysctl_value)]

PosixName = _text("name", POSIX_NAME, "a letter or '_' first, then letters, digits, '_', '.', '-' (at most 32; "
                  "the POSIX portable user-name set)")
QosName = _text("QoS name", QOS_NAME, "a lower-case letter first, then lower-case letters, digits, '_', '-' "
                 "(at most 32)")
Token = _text("name", TOKEN, "letters, digits, '_', '.', '-' (at most 64), not starting with '.' or '-'")
IfNameList = _text("NCCL_SOCKET_IFNAME", IFNAME_LIST, "an optional ^ or = and comma-separated interface names")
Version = _text("version", VERSION, "the characters package versions use: letters, digits and . + ~ : _ -")
PackageName = _text("package name", PACKAGE, "lower case letters, digits and + . _ -")
NameGlob = _text("name pattern", NAME_GLOB, "a package or unit name with * and ? wildcards: letters, digits and "
                 "@ + . _ - * ?")
SlurmTime = _text("Slurm time", SLURM_TIME, "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or INFINITE")
MountSource = _text("mount source", MOUNT_SOURCE, "no spaces or shell characters, e.g. nfs01:/export/home, "
                    "10.0.0.1@o2ib:/lustre, tmpfs")
MountOptions = _text("mount options", MOUNT_OPTIONS, "comma-separated options without spaces, e.g. rw,hard,vers=4.2")
IfName = _text("interface name", IFNAME, "letters, digits and _ . : - (at most 15), e.g. ib0 or eth1")
ExportClient = _text("NFS export client", EXPORT_CLIENT, "a host name (wildcards * and ?), an IP address, a "
                     "network as ADDRESS/PREFIX, or @netgroup, e.g. 10.0.0.0/24")
EmailAddress = _text("e-mail address", EMAIL, "a plain address such as oncall@example.org (letters, digits and "
                      "_ . + - before the @, a host name after it)")
HostPort = _text("HOST:PORT", HOST_PORT, "a host name or IPv4 address, a colon and a port, e.g. smtp.example.org:25")
SysctlKey = _text("sysctl key", SYSCTL_KEY, "dot-separated words, e.g. net.core.rmem_max")

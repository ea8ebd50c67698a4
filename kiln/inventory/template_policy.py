"""What a template in an inventory value kiln reads may do: name variables, index them, compare,
add, and pass them through filters that only reshape data. Nothing that reads the operator's disk
(``{% include %}``, ``{% import %}``, ``is file``), runs a function (``lookup()``, ``range()``, a
method), loops, sets variables, raises to a power, formats with ``%``, or runs a regular expression
(backtracking) is allowed. Every template Ansible compiles while kiln reads an inventory is checked
first, so a kiln value that names another variable cannot reach through it either.

On top of the allow-list, each render is bounded in time and memory (``bounded_render``): a template
that is allowed but costly (a string multiplied by a large variable) is stopped, not run to the end.
"""

from __future__ import annotations

import contextlib
import resource
import signal
import threading
from collections.abc import Iterator
from functools import lru_cache

import jinja2
from jinja2 import nodes

RENDER_SECONDS = 2.0  # one value's render
RENDER_MEMORY = 256 * 1024 * 1024  # bytes one value's render may add to the process
MAX_MULTIPLIER = 10_000  # a constant factor of '*'

# Filters that reshape data and read nothing outside their arguments.
FILTERS = frozenset({
    "default", "d", "int", "float", "string", "bool", "lower", "upper", "capitalize", "title", "trim",
    "join", "first", "last", "length", "count", "list", "abs", "round", "min", "max", "unique", "sort",
    "reverse", "combine", "dict2items", "items2dict", "mandatory", "flatten", "to_json", "from_json",
    "to_yaml", "from_yaml", "basename", "dirname", "splitext", "split", "difference", "intersect", "union",
    "zip", "ternary", "type_debug", "b64encode", "b64decode", "hash", "checksum",
})
# Tests on values, never on the operator's disk (file, directory, link, exists, abs, mount, same_file)
# and never a regular expression (match, search, regex).
TESTS = frozenset({
    "defined", "undefined", "none", "number", "string", "mapping", "sequence", "iterable", "integer",
    "float", "boolean", "true", "false", "eq", "equalto", "==", "ne", "!=", "lt", "<", "gt", ">", "le", "<=",
    "ge", ">=", "in", "odd", "even", "divisibleby", "version", "version_compare", "lower", "upper",
    "sameas", "subset", "superset", "contains", "truthy", "falsy",
})
NODES = (nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name, nodes.Const, nodes.Getattr,
         nodes.Getitem, nodes.Slice, nodes.Filter, nodes.Test, nodes.CondExpr, nodes.If, nodes.And, nodes.Or,
         nodes.Not, nodes.Compare, nodes.Operand, nodes.Concat, nodes.Add, nodes.Sub, nodes.Neg, nodes.Pos,
         nodes.Div, nodes.FloorDiv, nodes.Mul, nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair, nodes.Keyword)
# What a refused node is called in the message.
WHAT = {nodes.Include: "{% include %}", nodes.Import: "{% import %}", nodes.FromImport: "{% from ... import %}",
        nodes.Extends: "{% extends %}", nodes.For: "{% for %}", nodes.Assign: "{% set %}",
        nodes.AssignBlock: "{% set %}", nodes.Macro: "{% macro %}", nodes.CallBlock: "{% call %}",
        nodes.FilterBlock: "{% filter %}", nodes.With: "{% with %}", nodes.Block: "{% block %}",
        nodes.Call: "a function call", nodes.Pow: "'**'", nodes.Mod: "'%'"}


class TemplateRefused(Exception):
    """A template does something kiln does not allow in inventory values."""


_PARSER = jinja2.Environment()


@lru_cache(maxsize=4096)
def refusal(template: str) -> str | None:
    """Why ``template`` is not allowed, or None. Pure: parses, never renders."""
    try:
        tree = _PARSER.parse(template)
    except jinja2.TemplateSyntaxError:
        return None  # Ansible reports the syntax error itself, with its own words
    for node in tree.find_all(nodes.Node):
        if isinstance(node, nodes.Filter) and node.name not in FILTERS:
            return f"the filter {node.name!r} is not allowed in values kiln reads"
        if isinstance(node, nodes.Test) and node.name not in TESTS:
            return f"the test {node.name!r} is not allowed in values kiln reads (it may look at this machine's files)"
        if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
            return f"the attribute {node.attr!r} is not allowed in values kiln reads"
        if isinstance(node, nodes.Mul) and any(isinstance(side, nodes.Const) and (
                isinstance(side.value, str) or (isinstance(side.value, int) and abs(side.value) > MAX_MULTIPLIER))
                for side in (node.left, node.right)):
            return f"'*' with a string or a factor over {MAX_MULTIPLIER} is not allowed in values kiln reads"
        if not isinstance(node, NODES):
            what = next((w for t, w in WHAT.items() if isinstance(node, t)), type(node).__name__)
            return f"{what} is not allowed in values kiln reads"
    return None


def check(template: str) -> None:
    reason = refusal(template)
    if reason:
        raise TemplateRefused(f"{reason}: kiln renders variables, comparisons, arithmetic and data filters "
                              "only; write the value itself")


class RenderBound(Exception):
    """A render ran past its time or memory."""


def why_refused(exc: BaseException) -> str | None:
    """kiln's own reason inside an error Ansible raised while rendering (it wraps what a render raises
    in "Error rendering template"): a refusal, a bound, or memory exhausted under the bound."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (TemplateRefused, RenderBound)):
            return str(exc)
        if isinstance(exc, MemoryError):
            return f"the template needed more than {RENDER_MEMORY // 2**20} MiB to render"
        exc = exc.__cause__ or exc.__context__
    return None


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


@contextlib.contextmanager
def bounded_render(seconds: float = RENDER_SECONDS, memory: int = RENDER_MEMORY) -> Iterator[None]:
    """Bound what runs inside: ``seconds`` of wall time (SIGALRM; in the main thread only) and
    ``memory`` bytes of address space beyond what the process holds now (RLIMIT_AS). Past either,
    RenderBound is raised with what was exceeded; both limits are restored afterwards."""
    main = threading.current_thread() is threading.main_thread()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space() + memory
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or limit < soft:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))

    def timed_out(*_):
        raise RenderBound(f"the template took more than {seconds:g} s to render")

    previous = signal.signal(signal.SIGALRM, timed_out) if main else None
    if main:
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except MemoryError:
        raise RenderBound(f"the template needed more than {memory // 2**20} MiB to render") from None
    finally:
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

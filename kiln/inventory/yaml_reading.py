"""How kiln reads an inventory's YAML: PyYAML's C loader where it is built (the pure-Python one
otherwise), Ansible's tags (``!vault``, ``!unsafe``) as plain values, aliases bounded, every mapping
key's line known from the parse (no rescans of the text), and the values kiln reads held to one
meaning: a key given twice, or a plain scalar that YAML 1.1 reads as a number other than the digits
a reviewer sees (``021002`` is octal 8706, ``1:30`` is sexagesimal 90, ``0x1F``, ``0b101``), is
refused, naming its line. Pure: no Ansible, no files."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_YAML_VALUES = 1_000_000  # values of one YAML document once its aliases are expanded

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
C_LOADER = _BaseLoader is not yaml.SafeLoader


class _Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """A safe loader that accepts Ansible's tags (``!vault``, ``!unsafe``) as plain values."""


def _tagged(loader: Any, suffix: str, node: yaml.Node) -> Any:
    loader.kiln_tags.add(suffix)
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_Loader.add_multi_constructor("!", _tagged)

# YAML 1.1 integers and floats that are not what their digits say in decimal (PyYAML's resolver, and
# so Ansible's, reads them so): octal with a leading 0, sexagesimal with ':', hex, binary.
_SURPRISING = (
    (re.compile(r"[-+]?0[0-7_]+", re.ASCII), "YAML 1.1 reads a number with a leading 0 as octal ({value} is {number})"),
    (re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?", re.ASCII),
     "YAML 1.1 reads numbers with ':' as base 60 ({value} is {number})"),
    (re.compile(r"[-+]?0x[0-9a-fA-F_]+", re.ASCII), "YAML 1.1 reads 0x as hexadecimal ({value} is {number})"),
    (re.compile(r"[-+]?0b[01_]+", re.ASCII), "YAML 1.1 reads 0b as binary ({value} is {number})"),
)


@dataclass
class Problem:
    line: int
    key: str
    message: str


@dataclass
class Document:
    data: Any
    # every mapping key's text -> the line (1-based) where it first appears as a key
    key_lines: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)  # Ansible's tags the document uses (vault, unsafe)
    # id() of each string of ``data`` that holds template syntax -> its line (Ansible's origin of it);
    # None when the document was built by PyYAML's constructor (numbers beyond decimal, aliases, tags)
    template_lines: dict[int, int] | None = None


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values ``node`` stands for once every alias in it is expanded (an alias is the same node
    object again, so shared subtrees are counted each time they are used, and computed once)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = MAX_YAML_VALUES + 1  # a node that contains itself expands for ever
    if isinstance(node, yaml.SequenceNode):
        total = 1 + sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    else:
        total = 1
    sizes[id(node)] = total = min(total, MAX_YAML_VALUES + 1)
    return total


def _surprise(node: yaml.ScalarNode) -> str | None:
    if node.style not in (None, "") or node.tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
        return None
    for pattern, message in _SURPRISING:
        if pattern.fullmatch(node.value):
            number = yaml.safe_load(node.value)
            return (f"{message.format(value=node.value, number=number)}: quote it if you mean the text, or write "
                    "the number in plain decimal")
    return None


def _walk(node: yaml.Node, path: str, read: Callable[[str], bool], all_duplicates: bool, inside: bool,
          doc: Document, seen: set[int]) -> None:
    """Record every key's first line; refuse a key given twice where ``all_duplicates`` (a hosts file:
    its groups and hosts are kiln's) or ``inside`` a value kiln reads, and a surprising number
    ``inside`` one. ``read(key)``: whether kiln reads a variable of that name."""
    if id(node) in seen:
        return  # an alias: walked where it was defined
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: dict[str, int] = {}
        for key_node, value in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            line = key_node.start_mark.line + 1
            doc.key_lines.setdefault(key, line)
            where = f"{path}.{key}" if path else key
            if (all_duplicates or inside or read(key)) and key in keys and key != "<<":
                doc.problems.append(Problem(line, where, f"{key!r} is given twice in one mapping (also on line "
                                                         f"{keys[key]}); YAML keeps only the last: write it once"))
            keys.setdefault(key, line)
            _walk(value, where, read, all_duplicates, inside or read(key), doc, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, f"{path}[{i}]", read, all_duplicates, inside, doc, seen)
    elif inside and isinstance(node, yaml.ScalarNode):
        why = _surprise(node)
        if why:
            doc.problems.append(Problem(node.start_mark.line + 1, path, why))


_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_NOT_PLAIN = object()


_INT = "tag:yaml.org,2002:int"
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)", re.ASCII)


def _plain_document(root: yaml.Node, loader: Any, template_lines: dict[int, int]) -> Any:
    """The data of a document whose every node is a string, a mapping with string keys or a list (what
    PyYAML's constructor gives for it, built without its per-node calls: a third of reading a
    20,000-team file), or _NOT_PLAIN: numbers, booleans, nulls, dates, aliases, merge keys and tags are
    left to PyYAML's constructor."""
    seen: set[int] = set()

    def build(node: yaml.Node) -> Any:
        if id(node) in seen:
            raise _Fallback  # an alias
        seen.add(id(node))
        tag = node.tag
        if tag == _STR:
            if "{" in node.value:
                template_lines[id(node.value)] = node.start_mark.line + 1
            return node.value
        if isinstance(node, yaml.ScalarNode) and tag.startswith("tag:yaml.org,2002:"):
            if tag == _INT and _DECIMAL.fullmatch(node.value):
                return int(node.value)
            return loader.construct_object(node, deep=True)  # booleans, nulls, other numbers, dates
        if tag == _MAP:
            out = {}
            for key_node, value_node in node.value:
                if key_node.tag != _STR:
                    raise _Fallback  # a merge key, a number as key
                out[key_node.value] = build(value_node)
            return out
        if tag == _SEQ:
            return [build(child) for child in node.value]
        raise _Fallback

    try:
        return build(root)
    except (_Fallback, RecursionError):
        return _NOT_PLAIN


class _Fallback(Exception):
    pass


def load(text: str, read: Callable[[str], bool] = lambda key: False, hosts_file: bool = False) -> Document:
    """Parse one YAML document. ``read(key)``: whether kiln reads a variable of that name (its value,
    at any depth, is held to one meaning); ``hosts_file``: a key given twice anywhere is refused (a
    host listed twice in a group, a group twice). Raises yaml.YAMLError for a syntax error or an
    alias bomb."""
    loader = _Loader(text)
    loader.kiln_tags = set()
    try:
        node = loader.get_single_node()
        if node is None:
            return Document(None)
        template_lines: dict[int, int] = {}
        plain = _plain_document(node, loader, template_lines)  # no alias in it: as many values as nodes
        if plain is _NOT_PLAIN and _expanded_size(node, {}) > MAX_YAML_VALUES:
            raise yaml.YAMLError(f"its aliases expand to more than {MAX_YAML_VALUES} values (an alias bomb?): "
                                 "write the values out")
        doc = Document(None)
        _walk(node, "", read, hosts_file, False, doc, set())
        doc.data = plain if plain is not _NOT_PLAIN else loader.construct_document(node)
        doc.template_lines = template_lines if plain is not _NOT_PLAIN else None
        doc.tags = loader.kiln_tags
        return doc
    finally:
        loader.dispose()

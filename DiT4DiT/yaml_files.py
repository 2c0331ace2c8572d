"""A YAML file a user gave (a config, a mixture file, a run's config.yaml), read with bounds.

`yaml.safe_load` runs no code but bounds nothing: a 3 GB sparse file is read whole, and anchors nested a few
levels deep (billion laughs) expand to more nodes than memory holds once a consumer walks them (OmegaConf, a
merge, a copy). Here the file is refused before parsing when larger than MAX_BYTES or not UTF-8 text, and after
composing (aliases are shared nodes then, so that is cheap) when it would expand to more than MAX_NODES nodes.
"""

from __future__ import annotations

from pathlib import Path

import yaml

MAX_BYTES = 4 * 1024 * 1024  # configs and mixture files are kilobytes; a mixture of 10,000 datasets is ~1 MB
MAX_NODES = 200_000  # values after expanding every alias; the largest shipped config has under 1,000


class _SelfReference(ValueError):
    """An anchor used inside its own value (`a: &b [*b]`): the document never ends once expanded."""


def _expanded(node: yaml.Node, sizes: dict[int, int], limit: int, inside: set[int]) -> int:
    """Nodes under `node` with every alias expanded (each shared node counted at each use), stopping past `limit`;
    `inside`: the nodes being counted above this one (meeting one again is a self-reference)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    if id(node) in inside:
        raise _SelfReference
    size = 1
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [item for pair in node.value for item in pair]
    else:
        children = []
    inside.add(id(node))
    for child in children:
        size += _expanded(child, sizes, limit, inside)
        if size > limit:
            break
    inside.discard(id(node))
    sizes[id(node)] = size
    return size


def _more_entries_than(text: str, bound: int) -> bool:
    """Whether the document is a list of more than `bound` entries, read from the parser's events and stopping at
    entry bound + 1 (composing a 100,000-entry file first takes 20 s)."""
    depth, entries = 0, 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if depth == 0 and isinstance(event, yaml.MappingStartEvent):
            return False  # not a list
        if depth == 1 and isinstance(event, yaml.NodeEvent):
            entries += 1
            if entries > bound:
                return True
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return False


KINDS = {yaml.MappingNode: "a mapping (key: value lines)", yaml.SequenceNode: "a list (- item lines)",
         yaml.ScalarNode: "a single value"}


def checked_yaml_text(path: str | Path, error: type[Exception], what: str = "YAML file",
                      top: type[yaml.Node] | None = None, max_entries: tuple[int, str] | None = None) -> str:
    """The file's text, or `error` naming the file and the bound it breaks (or, with `top`, the kind of YAML
    document it must be: an empty file passes; with `max_entries` = (bound, reason), a top-level list may hold at
    most that many entries). YAML syntax errors propagate as yaml.YAMLError for the caller to report with its
    line."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise error(f"{path}: {size:,} bytes, more than the {MAX_BYTES // 2**20} MiB a {what} may have; give the "
                        "right file (a config or mixture file is a few kilobytes of YAML text)")
        with open(path, "rb") as stream:
            raw = stream.read(MAX_BYTES + 1)  # a file that grows, or a device, is read no further than the cap
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror or exc}); check the path and its permissions") from None
    if len(raw) > MAX_BYTES:
        raise error(f"{path}: more than the {MAX_BYTES // 2**20} MiB a {what} may have; give the right file")
    if b"\0" in raw:
        raise error(f"{path}: a binary file (it holds NUL bytes), not a {what}; give the YAML text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}); a {what} is YAML text, saved as UTF-8") from None
    if max_entries is not None and _more_entries_than(text, max_entries[0]):
        raise error(f"{path}: more than {max_entries[0]:,} entries; a {what} holds at most {max_entries[0]:,} "
                    f"({max_entries[1]})")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise error(f"{path}: nested too deeply for a {what}; flatten it") from None
    if node is not None and top is not None and not isinstance(node, top):
        raise error(f"{path}: the file is {KINDS[type(node)]}; a {what} is {KINDS[top]}")
    try:
        size = _expanded(node, {}, MAX_NODES, set()) if node is not None else 0
    except _SelfReference:
        raise error(f"{path}: an anchor is used inside its own value (like `a: &b [*b]`), so the {what} never ends; "
                    "write the values out plainly") from None
    if size > MAX_NODES:
        raise error(f"{path}: expands to more than {MAX_NODES:,} values (anchors and aliases nested inside each "
                    f"other?); a {what} this large is not one we read, so write the values out plainly")
    return text

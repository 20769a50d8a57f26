"""Adding an example to a topic file: the YAML rewritten round-trip (ruamel.yaml), so a person's
comments, key order and quoting survive; checked before it is written, written atomically."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import yaml
from pydantic import ValidationError

from nexus_assets.core.fingerprint import normalize
from nexus_assets.core.models import Topic


class TopicFileUnwritable(RuntimeError):
    """The topic file cannot take the example (unreadable, not a mapping, not writable)."""


def _load(path: Path):
    """(round-trip loader, the file's data, its text, whether it had a BOM)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TopicFileUnwritable(f"topic file {path}: cannot be read ({exc.strerror or exc})") from None
    bom = raw.startswith(b"\xef\xbb\xbf")
    source = raw.decode("utf-8-sig")
    rt = YAML()  # round-trip: comments, order and styles kept
    rt.preserve_quotes = True
    rt.width = 1 << 20  # never fold a long example over lines
    try:
        data = rt.load(source)
    except YAMLError as exc:
        raise TopicFileUnwritable(f"topic file {path}: not valid YAML: {exc}") from None
    if not isinstance(data, CommentedMap):
        raise TopicFileUnwritable(f"topic file {path}: not a mapping; edit its examples by hand")
    return rt, data, source, bom


def remove_examples(path: Path, texts) -> int:
    """Take these texts (compared normalised) out of the file's examples, for `nexus forget`:
    the number removed (0: the file is not touched)."""
    rt, data, source, bom = _load(path)
    gone = {normalize(t) for t in texts}
    examples = data.get("examples")
    removed = 0
    if isinstance(examples, dict):
        for verdict in ("keep", "drop"):
            listed = examples.get(verdict)
            if isinstance(listed, list):
                for i in reversed(range(len(listed))):
                    if isinstance(listed[i], str) and normalize(listed[i]) in gone:
                        del listed[i]
                        removed += 1
    if removed:
        out = io.StringIO()
        rt.dump(data, out)
        _write(path, out.getvalue(), bom)
    return removed


def add_example(path: Path, verdict: str, text: str) -> bool:
    """Put `text` in the file's `examples.<verdict>` (and out of the other list, where a person
    changed their mind). Returns False when it is there already (the file is not touched)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    other = "drop" if verdict == "keep" else "keep"
    rt, data, source, bom = _load(path)
    examples = data.get("examples")
    if examples is None:
        examples = CommentedMap()
        data["examples"] = examples
    if not isinstance(examples, dict):
        raise TopicFileUnwritable(f"topic file {path}: `examples` is not a mapping with `keep` and `drop`; fix it by hand")
    wanted = normalize(text)
    changed = False
    theirs = examples.get(other)
    if isinstance(theirs, list):
        for i in reversed(range(len(theirs))):
            if isinstance(theirs[i], str) and normalize(theirs[i]) == wanted:
                del theirs[i]
                changed = True
    ours = examples.get(verdict)
    if ours is None:
        ours = CommentedSeq()
        if verdict == "keep":
            examples.insert(0, "keep", ours)  # keep before drop, as docs/inputs.md shows them
        else:
            examples[verdict] = ours
    if not isinstance(ours, list):
        raise TopicFileUnwritable(f"topic file {path}: `examples.{verdict}` is not a list; fix it by hand")
    if not any(isinstance(t, str) and normalize(t) == wanted for t in ours):
        ours.append(text)
        changed = True
    if not changed:
        return False
    out = io.StringIO()
    rt.dump(data, out)
    new = out.getvalue()
    _check(path, source, new, verdict, text)
    _write(path, new, bom)
    return True


def _write(path: Path, new: str, bom: bool) -> None:
    """Replace the file whole (a reader never sees half of it), keeping its mode."""
    tmp = path.with_name(f".{path.name}.nexus-tmp")
    try:
        tmp.write_bytes((b"\xef\xbb\xbf" if bom else b"") + new.encode("utf-8"))
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp.is_file():
            tmp.unlink()
        raise TopicFileUnwritable(f"topic file {path}: cannot be written ({exc.strerror or exc})") from None


def _check(path: Path, before: str, after: str, verdict: str, text: str) -> None:
    """The rewritten file reads as the old one plus the example, and is still a valid topic."""
    old, new = yaml.safe_load(before) or {}, yaml.safe_load(after) or {}
    same = {k: v for k, v in old.items() if k != "examples"} == {k: v for k, v in new.items() if k != "examples"}
    if not same or text not in ((new.get("examples") or {}).get(verdict) or ()):
        raise TopicFileUnwritable(f"topic file {path}: the example could not be added safely; add it by hand")
    try:
        Topic.model_validate(new)
    except ValidationError as exc:
        raise TopicFileUnwritable(f"topic file {path}: with the example it would not be a valid topic ({exc.errors()[0]['msg']})") from None

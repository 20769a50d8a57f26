"""Topic definitions from `data/topics/*.yaml`, validated with pydantic."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from nexus_assets.core.models import Topic
from nexus_assets.core.validation import explain


@dataclass(frozen=True)
class TopicFile:
    path: Path
    topic: Topic | None
    problem: str | None = None
    # (topic_id, the earlier file that defines it too): ambiguous configuration, see `topic_id_conflicts`.
    duplicate_of: tuple[str, Path] | None = None


def read_topic_file(path: Path) -> TopicFile:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return TopicFile(path, None, f"topic file {path}: not UTF-8 text")
    except yaml.YAMLError as exc:
        return TopicFile(path, None, f"topic file {path}: not valid YAML: {exc}")
    if not isinstance(data, dict):
        return TopicFile(path, None, f"topic file {path}: expected a mapping with topic_id, display_name, extraction_policy")
    try:
        return TopicFile(path, Topic.model_validate(data))
    except ValidationError as exc:
        return TopicFile(path, None, f"topic file {path}: {explain(exc, whole='topic', limit=10)}{_did_you_mean(exc)}")


def _key_places() -> dict[str, list[tuple[str, ...]]]:
    """Every key a topic file may use, at any level (the models' own field names), with where it
    belongs: () for the top level, ("extraction_policy",) for a key under that one, and so on."""
    places: dict[str, list[tuple[str, ...]]] = {}
    todo: list[tuple[type, tuple[str, ...]]] = [(Topic, ())]
    while todo:
        model, at = todo.pop()
        for name, field in model.model_fields.items():
            places.setdefault(name, []).append(at)
            nested = [t for t in getattr(field.annotation, "__args__", (field.annotation,)) if isinstance(t, type) and hasattr(t, "model_fields")]
            todo.extend((t, (*at, name)) for t in nested)
    return places


def _where(at: tuple[str, ...]) -> str:
    return "at the top level of the topic file" if not at else "under " + ".".join(repr(part) for part in at)


def _did_you_mean(exc: ValidationError) -> str:
    """A misspelt key is the usual cause of an unknown one (`requried_keywords`): name the key meant.
    A right key at the wrong level (`min_relevance` under `extraction_policy`) is told where it belongs."""
    places = _key_places()
    hints = []
    for err in exc.errors():
        if err["type"] == "extra_forbidden" and err["loc"]:
            key, at = str(err["loc"][-1]), tuple(str(part) for part in err["loc"][:-1])
            if key in places:
                hints.append(f"{key!r} is not a key {_where(at)}; it belongs {' or '.join(_where(p) for p in places[key])}")
                continue
            close = difflib.get_close_matches(key, sorted(places), n=1, cutoff=0.75)
            if close:
                hints.append(f"{key!r} is not a topic key; did you mean {close[0]!r}?")
    return f" ({'; '.join(hints)})" if hints else ""


def read_topic_files(topics_dir: Path) -> list[TopicFile]:
    """Every topic file in the folder; two files defining one topic_id is an error for the second
    (and a sync refuses to run: `topic_id_conflicts`)."""
    if not topics_dir.is_dir():
        return []
    files = sorted(p for p in topics_dir.iterdir() if p.suffix.lower() in (".yaml", ".yml") and p.is_file())
    seen: dict[str, Path] = {}
    out = []
    for path in files:
        tf = read_topic_file(path)
        if tf.topic is not None and tf.topic.topic_id in seen:
            tid = tf.topic.topic_id
            tf = TopicFile(path, None, f"topic file {path}: topic_id {tid!r} is already defined in {seen[tid]}", duplicate_of=(tid, seen[tid]))
        elif tf.topic is not None:
            seen[tf.topic.topic_id] = path
        out.append(tf)
    return out


def topic_id_conflicts(files: list[TopicFile]) -> list[str]:
    """One line per topic_id that more than one file defines. Which file is meant cannot be
    guessed (a file name decides nothing), so a sync refuses to start until one is left."""
    claimed: dict[str, list[Path]] = {}
    for tf in files:
        if tf.duplicate_of is not None:
            tid, first = tf.duplicate_of
            claimed.setdefault(tid, [first]).append(tf.path)
    return [
        f"topic_id {tid!r} is defined by {len(paths)} topic files: {', '.join(str(p) for p in paths)}; "
        "keep it in one of them (give the others their own topic_id, or remove them) and sync again"
        for tid, paths in sorted(claimed.items())
    ]


def find_topic(topics_dir: Path, topic_id: str) -> TopicFile | None:
    for tf in read_topic_files(topics_dir):
        if tf.topic is not None and tf.topic.topic_id == topic_id:
            return tf
    return None

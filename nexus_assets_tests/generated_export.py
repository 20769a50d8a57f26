"""A generated ChatGPT `conversations.json` with known subjects, for tests of `nexus discover`.

Like a real export, most conversations are one-off questions, and every assistant reply is
padded with the boilerplate assistants use everywhere ("feel free to ask", "step-by-step",
"best practices", "error message"): phrases whose words always come together, in many
conversations, without being a subject anyone returns to. That boilerplate is what flooded a
real vault with 100 DRAFT topics. A few subjects recur across many conversations; those are the
topics a person would accept. Deterministic: the same seed gives the same bytes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

# Subjects people return to: (name, vocabulary, how many conversations).
THEMES: dict[str, tuple[str, ...]] = {
    "sourdough": ("sourdough", "starter", "dough", "proofing", "crumb", "flour", "hydration", "levain"),
    "kubernetes": ("kubernetes", "pod", "helm", "ingress", "replica", "namespace", "kubectl", "deployment"),
    "taxes": ("tax", "deduction", "invoice", "receipts", "accountant", "vat", "filing", "expenses"),
    "marathon": ("marathon", "mileage", "tempo", "taper", "pace", "intervals", "runners", "splits"),
    "garden": ("tomatoes", "compost", "seedlings", "mulch", "watering", "trellis", "aphids", "greenhouse"),
}
# Said once, in one conversation each: real subjects too rare to be a topic.
ONE_OFFS: tuple[tuple[str, ...], ...] = (
    ("violin", "rosin", "bow"), ("aquarium", "guppies", "filter"), ("chess", "opening", "gambit"),
    ("passport", "renewal", "embassy"), ("wedding", "speech", "toast"), ("piano", "scales", "chords"),
    ("mortgage", "refinance", "rate"), ("resume", "cover", "letter"), ("bicycle", "derailleur", "chain"),
    ("knitting", "yarn", "stitch"), ("camping", "tent", "stove"), ("coffee", "grinder", "espresso"),
)
# Assistant boilerplate: each phrase's words always travel together.
BOILERPLATE = (
    "Feel free to ask if anything is unclear.",
    "Here is a step-by-step breakdown of the approach.",
    "These best practices should keep things reliable.",
    "Check the error message carefully before retrying.",
    "I hope this detailed explanation clarifies the situation.",
    "Consider the trade-offs between flexibility and simplicity.",
    "Let me walk through a concrete example scenario.",
    "Double-check the configuration settings before proceeding.",
    "This depends on your specific requirements and constraints.",
    "Happy to elaborate further on any particular aspect.",
)
# Everyday words any conversation may use.
FILLER = (
    "morning evening weekend plan time friend family week month year detail result option idea question answer "
    "problem solution change list number simple quick small large early late short long start finish today"
).split()


@dataclass(frozen=True)
class GeneratedExport:
    path: Path
    subject_of: dict[str, str]  # conversation id -> theme name ("" for a one-off question)

    def conversations_about(self, theme: str) -> set[str]:
        return {c for c, t in self.subject_of.items() if t == theme}


def _message(node_id: str, role: str, text: str, t: float) -> dict:
    return {
        "id": node_id,
        "author": {"role": role, "name": None, "metadata": {}},
        "create_time": t,
        "content": {"content_type": "text", "parts": [text]},
        "status": "finished_successfully",
        "metadata": {},
        "recipient": "all",
    }


def _conversation(cid: str, turns: list[tuple[str, str]], t0: float) -> dict:
    mapping: dict = {"root": {"id": "root", "message": None, "parent": None, "children": []}}
    parent = "root"
    for i, (role, text) in enumerate(turns):
        node_id = f"{cid}-{i}"
        mapping[node_id] = {"id": node_id, "message": _message(node_id, role, text, t0 + i), "parent": parent, "children": []}
        mapping[parent]["children"].append(node_id)
        parent = node_id
    return {"title": cid, "create_time": t0, "update_time": t0 + len(turns), "mapping": mapping, "current_node": parent,
            "conversation_id": cid, "id": cid}


def _sentence(rng: random.Random, words: list[str]) -> str:
    picked = words + rng.sample(FILLER, 3)
    rng.shuffle(picked)
    return " ".join(picked).capitalize() + "."


def _words(rng: random.Random, vocabulary: tuple[str, ...], k: int) -> list[str]:
    """One of the subject's first two words (what people call it), then k - 1 others of it."""
    anchor = rng.choice(vocabulary[:2])
    return [anchor, *rng.sample([w for w in vocabulary if w != anchor], min(k - 1, len(vocabulary) - 1))]


def _turns(rng: random.Random, vocabulary: tuple[str, ...], exchanges: int) -> list[tuple[str, str]]:
    turns = []
    for _ in range(exchanges):
        turns.append(("user", _sentence(rng, _words(rng, vocabulary, 2))))
        reply = [_sentence(rng, _words(rng, vocabulary, 3)) for _ in range(2)]
        reply += rng.sample(BOILERPLATE, 3)  # every reply, every conversation
        turns.append(("assistant", " ".join(reply)))
    return turns


def generate_export(
    runs_dir: Path, *, per_theme: int = 24, one_off_questions: int = 200, seed: int = 32, themes: dict | None = None
) -> GeneratedExport:
    """Write `runs_dir/generated/conversations.json`: `per_theme` conversations on each theme, and
    `one_off_questions` one-off conversations (each about one of ONE_OFFS, or everyday filler)."""
    rng = random.Random(seed)
    themes = THEMES if themes is None else themes
    plan = [(name, vocab) for name, vocab in themes.items() for _ in range(per_theme)]
    for i in range(one_off_questions):
        plan.append(("", ONE_OFFS[i] if i < len(ONE_OFFS) else tuple(rng.sample(FILLER, 4))))
    rng.shuffle(plan)
    conversations, subject_of = [], {}
    for i, (theme, vocab) in enumerate(plan):
        cid = f"conv-{i:04d}"
        conversations.append(_conversation(cid, _turns(rng, vocab, rng.randint(1, 3)), 1_720_000_000.0 + 3600 * i))
        subject_of[cid] = theme
    path = runs_dir / "generated" / "conversations.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(conversations, indent=1), encoding="utf-8")
    return GeneratedExport(path, subject_of)

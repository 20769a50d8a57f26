"""The names a person reads for a run: its conversation title and the day it started, instead of
a UUID. Pure: `RunRecords.run_names` reads the title from the stored JSON."""

from __future__ import annotations

from dataclasses import dataclass

TITLE_WIDTH = 80


@dataclass(frozen=True)
class RunName:
    run_id: str
    title: str | None  # the export's conversation title (ChatGPT `title`, Claude `name`, a run's `title`)
    date: str | None  # YYYY-MM-DD the conversation started
    # A coding-agent session's project folder (its cwd); None for conversations.
    project: str | None = None

    @property
    def label(self) -> str:
        """`"Title" (2024-12-01)`, or `"Title" (project, 2024-12-01)` for a coding-agent session; a run
        without a title is named by its id (Nexus run ids are names)."""
        name = f"\u201c{self.title}\u201d" if self.title else self.run_id
        shown = [p for p in (project_label(self.project), self.date) if p]
        return f"{name} ({', '.join(shown)})" if shown else name

    def as_json(self) -> dict:
        # `run_project` only where there is one: conversations' objects stay as they were.
        named = {"run_title": self.title, "run_date": self.date}
        if self.project:
            named["run_project"] = self.project
        return named


def clean_title(value: object) -> str | None:
    """A title as one printable line of at most TITLE_WIDTH characters; None when there is none.
    Titles come from the export, so control characters never reach a terminal."""
    if not isinstance(value, str):
        return None
    text = " ".join("".join(c if c.isprintable() else " " for c in value).split())
    if not text:
        return None
    return text if len(text) <= TITLE_WIDTH else text[: TITLE_WIDTH - 1] + "\u2026"


def project_label(project: str | None) -> str | None:
    """A project folder as people name it: its last part (`/home/ana/code/nexus` → `nexus`)."""
    if not project:
        return None
    return clean_title(project.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or project)


def run_name(run_id: str, title: object, started_at: str | None, project: object = None) -> RunName:
    return RunName(
        run_id,
        clean_title(title),
        started_at[:10] if started_at and len(started_at) >= 10 else None,
        project if isinstance(project, str) and project.strip() else None,
    )

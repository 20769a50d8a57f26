"""Progress of a sync's LLM requests: a bar on a terminal, plain lines otherwise, and the same
numbers in the Dagster run log (chunks done / total, requests in flight, tokens, spend, ETA)."""

from __future__ import annotations

import sys
import time

import dagster as dg

from nexus_assets.llm.client import SendProgress

BAR_WIDTH = 24


class LLMProgress:
    """Called after every answered chunk; says something at most every `interval_s` (and at the end)."""

    def __init__(self, context: dg.OpExecutionContext, *, topic_id: str, echo: bool, interval_s: float = 5.0):
        self.context = context
        self.topic_id = topic_id
        self.echo = echo  # the CLI asked for progress on stderr
        self.tty = echo and sys.stderr.isatty()
        self.interval_s = interval_s
        self._last_line = time.monotonic()
        self._last_bar = 0.0

    def __call__(self, progress: SendProgress) -> None:
        now = time.monotonic()
        final = progress.done >= progress.total
        line = f"{self.topic_id}: {progress.line()}"
        if self.tty and (final or now - self._last_bar >= 0.1):
            self._last_bar = now
            filled = BAR_WIDTH * progress.done // max(progress.total, 1)
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            print(f"\r  [{bar}] {line}\033[K", end="\n" if final else "", file=sys.stderr, flush=True)
        if final or now - self._last_line >= self.interval_s:
            self._last_line = now
            self.context.log.info(line)
            if self.echo and not self.tty:
                print(f"  {line}", file=sys.stderr, flush=True)

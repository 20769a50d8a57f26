"""The `openai` pointer extractor (docs/openai.md): any OpenAI-compatible Chat Completions endpoint.

The model only points; its reply is parsed here but never trusted (the gate upstream checks
every pointer). Each answer is keyed per topic and stored through a `CallStore`, so a re-run
replays from the store, sends nothing and costs nothing. Settings and errors live in `config.py`,
the stored records in `records.py`, reply parsing in `replies.py`; they are re-exported here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.models import Run, Topic
from nexus_assets.llm.chunking import DEFAULT_TOKEN_BUDGET
from nexus_assets.llm.config import (
    CacheMiss,
    LLMConfig,
    LLMConfigError,
    LLMError,
    LLMFatalError,
    ReplyNotJSON,
)
from nexus_assets.llm.prompt import PROMPT_VERSION, topic_block_of
from nexus_assets.llm.records import BatchRecord, CallRecord, CallStore, RequestRecord
from nexus_assets.llm.replies import (
    _RESPONSE_FORMATS,
    POINTER_FORMATS,
    parse_json_reply,
    parse_reply,
    response_formats,
)
from nexus_assets.llm.handles import resolve_handles
from nexus_assets.llm.outcomes import ExtractionBatch, ExtractionOutcome, SendProgress
from nexus_assets.llm.requests import Request, call_key, plan_jobs, prompt_hash
from nexus_assets.llm.transport import ChatReply, ChatTransport, Fatal, TransportError

# Re-exported: what callers have always imported from here.
__all__ = [
    "BatchRecord", "CacheMiss", "CallRecord", "CallStore", "ChatReply", "ExtractionBatch", "ExtractionOutcome", "LLMConfig", "LLMConfigError", "LLMError",
    "LLMFatalError", "POINTER_FORMATS", "ReplyNotJSON", "RequestRecord", "call_key", "parse_json_reply", "parse_reply",
    "prompt_hash", "response_formats", "SendProgress",
]


class CallFailed(LLMError):
    """One call got no usable answer (retries exhausted, refused request); other calls may still work."""

    def __init__(self, message: str, *, attempts: int):
        super().__init__(message)
        self.attempts = attempts


class CostBudget:
    """Stops sending before the estimated spend would pass `limit_usd`: each request reserves its
    estimate before it is sent and settles at what its reply reports."""

    def __init__(self, limit_usd: float, price_in_per_mtok: float, price_out_per_mtok: float):
        self.limit_usd = limit_usd
        self.price_in = price_in_per_mtok
        self.price_out = price_out_per_mtok
        self.spent = 0.0
        self.reserved = 0.0

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.price_in + tokens_out * self.price_out) / 1_000_000

    def reserve(self, request: Request) -> float | None:
        estimate = self.cost(request.input_tokens_est, request.output_tokens_est)
        if self.spent + self.reserved + estimate > self.limit_usd:
            return None
        self.reserved += estimate
        return estimate

    def settle(self, reserved: float, tokens_in: int | None, tokens_out: int | None) -> None:
        self.reserved -= reserved
        if tokens_in is None and tokens_out is None:
            self.spent += reserved  # no usage reported: count what was estimated
        else:
            self.spent += self.cost(tokens_in or 0, tokens_out or 0)


@dataclass(frozen=True)
class ExtractionJob:
    """One run to extract for `topic`; `companions` are other topics that also lack an answer for
    it and are asked in the same requests (their answers are stored for their own steps)."""

    run: Run
    topic: Topic
    companions: tuple[Topic, ...] = ()


def split_pointers(pointers: list[Any], topic_ids: list[str]) -> dict[str, list[Any]]:
    """A reply's pointers per topic of the request. With one topic every item is that topic's
    (the gate judges each). With several, an item naming no topic of the request (malformed, or an
    unknown topic) goes to the first topic, so it is judged, and rejected, exactly once."""
    out: dict[str, list[Any]] = {t: [] for t in topic_ids}
    if len(topic_ids) == 1:
        out[topic_ids[0]] = list(pointers)
        return out
    for p in pointers:
        named = p.get("topic_id") if isinstance(p, dict) else None
        out[named if isinstance(named, str) and named in out else topic_ids[0]].append(p)
    return out


def _by_window(request: Request, by_run: dict[str, list[Any]]) -> dict[tuple[str, str, int], list[Any]]:
    """A reply's items (already by run) by (topic id, run id, window index) of the request's shares.
    An item whose path is in none of its run's windows goes to that run's first window, so the
    gate judges it once; items for a window are split among its topics by `split_pointers`."""
    window_of = {(s.run_id, n.path): s.window_index for s in request.shares for n in s.nodes}
    first_window: dict[str, int] = {}
    for s in request.shares:
        first_window.setdefault(s.run_id, s.window_index)
    out: dict[tuple[str, str, int], list[Any]] = {}
    for run_id, items in by_run.items():
        per_window: dict[int, list[Any]] = {}
        for item in items:
            path = item.get("json_path") if isinstance(item, dict) else None
            window = window_of.get((run_id, path), first_window[run_id]) if isinstance(path, str) else first_window[run_id]
            per_window.setdefault(window, []).append(item)
        for window, found in per_window.items():
            asked = sorted({s.topic.topic_id for s in request.shares if s.run_id == run_id and s.window_index == window})
            for topic_id, mine in split_pointers(found, asked).items():
                out[(topic_id, run_id, window)] = mine
    return out


class PointerClient:
    """Asks one OpenAI-compatible endpoint for pointers: concurrently (`config.concurrency`), each
    chunk once for every topic that needs it, every answer stored as it arrives and applied in
    chunk order, so the result does not depend on which reply came first."""

    def __init__(self, config: LLMConfig):
        self.config = config
        self._runner: asyncio.Runner | None = None
        self._transport: ChatTransport | None = None

    def _run(self, coro):
        # One event loop for the client's life: the SDK's connections belong to it.
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner.run(coro)

    async def _chat(self) -> ChatTransport:
        if self._transport is None:
            self._transport = ChatTransport(self.config)
        return self._transport

    def close(self) -> None:
        """Close the connections this client opened."""
        if self._runner is not None:
            if self._transport is not None:
                self._runner.run(self._transport.close())
            self._runner.close()
        self._runner, self._transport = None, None

    def __enter__(self) -> "PointerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def response_format_mode(self) -> str:
        index = self._transport.format_index if self._transport is not None else 0
        return _RESPONSE_FORMATS[index][0]

    def complete(self, messages: list[dict[str, Any]], *, formats=_RESPONSE_FORMATS) -> ChatReply:
        """One chat completion (retried where that can help) with response_format fallback.
        `formats`: another reply schema's ladder (see `response_formats`); pointers by default.
        Raises LLMFatalError (stop everything) or CallFailed (this call only)."""

        async def one() -> ChatReply:
            chat = await self._chat()
            return await chat.complete(messages, formats)

        try:
            return self._run(one())
        except Fatal as exc:
            fatal = LLMFatalError(str(exc))
            fatal.attempts = exc.attempts
            raise fatal from None
        except TransportError as exc:
            raise CallFailed(str(exc), attempts=exc.attempts) from None

    def complete_many(self, conversations: list[list[dict[str, Any]]], *, formats=_RESPONSE_FORMATS) -> list[ChatReply | CallFailed]:
        """`complete` for several conversations at once, at most `config.concurrency` in flight; each
        outcome in the order given. A fatal error (bad key, unknown model) fails the calls not yet
        answered, without sending them."""

        async def all_of() -> list[ChatReply | CallFailed]:
            chat = await self._chat()
            stop: list[Fatal] = []

            async def one(messages: list[dict[str, Any]]) -> ChatReply | CallFailed:
                if stop:
                    return CallFailed(f"not sent: {stop[0]}", attempts=0)
                try:
                    return await chat.complete(messages, formats)
                except Fatal as exc:
                    stop.append(exc)
                    return CallFailed(str(exc), attempts=exc.attempts)
                except TransportError as exc:
                    return CallFailed(str(exc), attempts=exc.attempts)

            return list(await asyncio.gather(*(one(m) for m in conversations)))

        return self._run(all_of()) if conversations else []

    def extract(
        self,
        topic: Topic,
        run: Run,
        *,
        store: CallStore,
        replay_only: bool = False,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        companions: tuple[Topic, ...] = (),
    ) -> ExtractionOutcome:
        """Pointers for one topic in one run (see `extract_runs`)."""
        batch = self.extract_runs(
            [ExtractionJob(run, topic, companions)], store=store, replay_only=replay_only, token_budget=token_budget
        )
        outcome = batch.outcomes[(topic.topic_id, run.run_id)]
        outcome.requests_sent = batch.requests_sent
        return outcome

    def extract_runs(
        self,
        jobs: list[ExtractionJob],
        *,
        store: CallStore,
        replay_only: bool = False,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        budget: CostBudget | None = None,
        progress: Callable[[SendProgress], None] | None = None,
        batch: bool = False,
    ) -> ExtractionBatch:
        """Pointers for each job's topic (and its companions) in each job's run: replayed from
        `store` where an answer is stored, else asked for, each chunk once for all of them.

        A failed request (server errors after every retry, a reply too large, late or with no
        pointer JSON) is stored as failed for each of its topics and asked again next time.
        LLMFatalError and CacheMiss stop the extraction; answers already stored are kept."""
        cfg = self.config
        result = ExtractionBatch()
        runs: dict[str, Run] = {}
        asked_for: list[tuple[Run, list[Topic]]] = []
        answered = lambda key: (r := store.get(key)) is not None and r.status == "ok"  # noqa: E731
        for job in jobs:
            runs[job.run.run_id] = job.run
            topics = [job.topic, *job.companions]
            for t in topics:
                result.outcomes[(t.topic_id, job.run.run_id)] = ExtractionOutcome()
            asked_for.append((job.run, topics if not replay_only else [job.topic]))
        # Every run's windows at once: small ones share a request (llm.requests.plan_jobs).
        stored, requests = plan_jobs(
            asked_for, model=cfg.model, token_budget=token_budget, max_output_tokens=cfg.max_output_tokens, answered=answered
        )
        if replay_only and requests:
            share = requests[0].shares[0]
            raise CacheMiss(share.key, share.topic, share.run_id)
        for share in stored:
            record = store.get(share.key).model_copy(update={"cached": True})
            result.outcomes[(share.topic.topic_id, share.run_id)].calls.append(record)
        result.requests = len(requests)
        if requests:
            if batch:
                self._run(self._send_batch(requests, runs, store, result, progress))
            else:
                self._run(self._send_all(requests, runs, store, result, budget, progress))
        # Answers in chunk order, whatever order they arrived in: the result is a sequential run's.
        for outcome in result.outcomes.values():
            outcome.calls.sort(key=lambda r: r.chunk_index)
            for record in outcome.calls:
                if record.status == "ok":
                    outcome.pointers.extend(record.pointers)
                else:
                    outcome.failed.append(record)
        if result.fatal is not None:
            raise result.fatal
        return result

    def apply_reply(
        self, request: Request, store: CallStore, result: ExtractionBatch, *, reply: ChatReply | None = None,
        error: TransportError | None = None, batch_id: str | None = None,
    ) -> None:
        """Store one request's outcome (the request once, an answer per topic) and note it."""
        cfg = self.config
        ids = request.topic_ids
        base = dict(model=cfg.model, prompt_version=PROMPT_VERSION, prompt_hash=request.prompt_hash)
        first = dict(run_id=request.run_id, chunk_index=request.window_index, chunk_count=request.window_count)
        # Each window's answers by topic: a pointer goes to the run its node handle names, and to
        # the window of that run its node is in.
        answers: dict[tuple[str, str, int], list[Any]] = {}
        if reply is not None:
            status, problem, fields = "ok", None, reply.record_fields()
            try:
                by_run = resolve_handles(parse_reply(reply.text), request.handles, request.run_id)
                answers = _by_window(request, by_run)
            except ReplyNotJSON as exc:
                status, problem = "failed", str(exc)
                if reply.finish_reason == "length":
                    problem += f" (the reply was cut off at max_output_tokens={cfg.max_output_tokens})"
            result.prompt_tokens += reply.prompt_tokens or 0
            result.completion_tokens += reply.completion_tokens or 0
            attempts = reply.attempts
        else:
            assert error is not None
            status, problem, attempts = "failed", str(error), error.attempts
            fields = dict(attempts=attempts, response_bytes=error.response_bytes, raw_response=error.kept)
        result.requests_sent += attempts
        store.put_request(
            RequestRecord(
                key=request.key, topic_ids=ids, request_json=canonical_json(request.messages),
                status=status, error=problem, batch_id=batch_id, **base, **first, **fields,
            )
        )
        # A request for one topic of one window is that answer's alone: it carries the tokens it cost.
        own = (
            {k: fields.get(k) for k in ("prompt_tokens", "completion_tokens", "latency_ms", "response_bytes", "response_sha256")}
            if len(request.shares) == 1
            else {}
        )
        for share in request.shares:
            record = CallRecord(
                key=share.key,
                topic_id=share.topic.topic_id,
                request_json=canonical_json({"request_key": request.key, "topic": topic_block_of(share.topic)}),
                pointers=answers.get((share.topic.topic_id, share.run_id, share.window_index), []) if status == "ok" else [],
                status=status,
                error=problem,
                attempts=attempts,
                response_format=fields.get("response_format"),
                request_key=request.key,
                run_id=share.run_id,
                chunk_index=share.window_index,
                chunk_count=share.window_count,
                **own,
                **base,
            )
            store.put(record)
            result.outcomes[(share.topic.topic_id, share.run_id)].calls.append(record)

    def mark_unsent(self, request: Request, result: ExtractionBatch) -> None:
        result.unsent += 1
        for share in request.shares:
            result.outcomes[(share.topic.topic_id, share.run_id)].unsent += 1

    async def _send_all(
        self, requests: list[Request], runs: dict[str, Run], store: CallStore, result: ExtractionBatch,
        budget: CostBudget | None, progress: Callable[[SendProgress], None] | None,
    ) -> None:
        chat = await self._chat()
        tracker = SendProgress(total=len(requests), cost_usd=0.0 if budget is not None or self._priced else None)
        stop = asyncio.Event()

        async def one(request: Request) -> None:
            async with chat.slots:
                if stop.is_set():
                    self.mark_unsent(request, result)
                    return
                reserved = 0.0
                if budget is not None:
                    estimate = budget.reserve(request)
                    if estimate is None:
                        # Stop here, not just skip: a smaller request later must not slip in.
                        result.stopped_by_cost = True
                        stop.set()
                        self.mark_unsent(request, result)
                        return
                    reserved = estimate
                tracker.in_flight += 1
                try:
                    reply = await chat.send(
                        request.messages, _RESPONSE_FORMATS, tokens=request.input_tokens_est + request.output_tokens_est
                    )
                except Fatal as exc:
                    stop.set()
                    self.apply_reply(request, store, result, error=exc)
                    fatal = LLMFatalError(str(exc))
                    fatal.attempts = exc.attempts
                    result.fatal = result.fatal or fatal
                    reply = None
                except TransportError as exc:
                    self.apply_reply(request, store, result, error=exc)
                    reply = None
                else:
                    self.apply_reply(request, store, result, reply=reply)
                finally:
                    tracker.in_flight -= 1
                    tracker.done += 1
                if budget is not None:
                    usage = (reply.prompt_tokens, reply.completion_tokens) if reply is not None else (None, None)
                    budget.settle(reserved, *usage)
                self._account(tracker, reply, budget)
                if progress is not None:
                    progress(tracker)

        try:
            await asyncio.gather(*(one(r) for r in requests))
        finally:
            result.peak_in_flight = max(result.peak_in_flight, chat.peak_in_flight)

    @property
    def _priced(self) -> bool:
        return self.config.price_in_per_mtok is not None and self.config.price_out_per_mtok is not None

    def _account(self, tracker: SendProgress, reply: ChatReply | None, budget: CostBudget | None) -> None:
        if reply is not None:
            tracker.prompt_tokens += reply.prompt_tokens or 0
            tracker.completion_tokens += reply.completion_tokens or 0
        if budget is not None:
            tracker.cost_usd = budget.spent
        elif self._priced:
            c = self.config
            tracker.cost_usd = (tracker.prompt_tokens * c.price_in_per_mtok + tracker.completion_tokens * c.price_out_per_mtok) / 1_000_000

    async def _send_batch(
        self, requests: list[Request], runs: dict[str, Run], store: CallStore, result: ExtractionBatch,
        progress: Callable[[SendProgress], None] | None,
    ) -> None:
        from nexus_assets.llm.batches import run_batches

        chat = await self._chat()
        await run_batches(self, chat, requests, store, result, progress)

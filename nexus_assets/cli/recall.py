"""`nexus recall` (read-only), `nexus ask` (grounded, audited; exit 1 when refused), `nexus audit`."""

from __future__ import annotations

import argparse
import json
import sys

from nexus_assets.cli.common import (
    settings_of,
    UsageError,
    emit,
    one_line,
    open_vault,
    require_topic,
)
from nexus_assets.cli.parsing import Commands, bounded, request_of, who_and_when
from nexus_assets.core import bounds
from nexus_assets.core.display import json_for_terminal, visible
from nexus_assets.core.utf8 import utf8_problem

# The requests' fields as these commands name them in a one-line error.
NAMES = {"query": "query", "question": "question", "topics": "topics", "speaker": "speaker", "k": "--k"}


def require_utf8(text: str, what: str) -> str:
    """The text as given; exit 2 with one line when a shell passed bytes that are not UTF-8 (its
    length is the request's to check: services/requests.py)."""
    problem = utf8_problem(text)
    if problem:
        raise UsageError(f"the {what} is {problem}; pass it as UTF-8 text")
    return text


def _topics(args: argparse.Namespace) -> list[str] | None:
    # Opened first so a missing vault or an unknown topic is a usage error (exit 2), not a traceback.
    with open_vault(args) as vault:
        for t in args.topic or []:
            require_topic(vault, t)
    return args.topic


def cmd_recall(args: argparse.Namespace) -> int:
    if args.repl:
        return _repl(args)
    if args.query is None or not require_utf8(args.query, "query").strip():
        raise UsageError("give a query (or --repl to read queries from standard input)")
    _topics(args)  # an unknown topic is named as such, whatever its length
    request = _recall_request(args, args.query)
    out, text = _recall_once(args, request, settings_of(args).as_env())
    emit(args, out, text)
    return 0


def _recall_request(args: argparse.Namespace, query: str):
    from nexus_assets.services.requests import RecallRequest

    return request_of(RecallRequest, NAMES, query=query, topics=args.topic, k=args.k, **_filters(args))


def _repl(args: argparse.Namespace) -> int:
    """One answer per line of standard input, in one process: the model and each topic's index are
    loaded once. With --json, one JSON object per line."""
    _topics(args)
    env = settings_of(args).as_env()
    for line in sys.stdin:
        query = line.strip()
        if not query:
            continue
        out, text = _recall_once(args, _recall_request(args, query), env)
        print(json_for_terminal(json.dumps(out, ensure_ascii=False, default=str)) if args.json else visible(text) + "\n", flush=True)
    return 0


def _recall_once(args: argparse.Namespace, request, env: dict) -> tuple[dict, str]:
    from nexus_assets.services.queries import recall

    query = request.query
    out = recall(args.db, request, env=env).model_dump(mode="json")
    if out["not_embedded"]:
        print(f"note: {out['not_embedded']} visible bricks are not embedded yet and cannot be recalled; "
              "run `nexus sync` without --no-recall to embed them", file=sys.stderr)
    lines, conversation = [], None
    for i, r in enumerate(out["results"], 1):
        # Results come in rank order; neighbours said in one conversation share its name.
        if _conversation(r) != conversation:
            conversation = _conversation(r)
            lines.append(f"from {conversation}:")
        # A note shows its topic and state; a sentence of the record, who said it.
        where = (f"{r['topic_id']} {r['brick_id'][:12]} [{r['state']}]" if r["kind"] == "brick"
                 else f"passage {r['passage_id'][:12]} [{r['sources'][0].get('speaker') or '?'}]")
        lines.append(f"  {i}. {r['confidence']:.2f} {where} ({r['reranker_used']})  {one_line(r['content'], 110)}")
    lines = lines or [f"nothing recalled for {query!r}"]
    lines += [f"(fell through: {n})" for n in out["fell_through"]]
    return out, "\n".join(lines)


def _filters(args: argparse.Namespace) -> dict:
    return {"speaker": args.speaker, "since": args.since, "until": args.until}


def _conversation(item: dict) -> str:
    """A result's or grounding source's conversation, as a person names it."""
    source = item["sources"][0] if item.get("sources") else item
    title, date = item.get("run_title"), item.get("run_date")
    name = f"\u201c{title}\u201d" if title else source.get("run_id", "?")
    return f"{name} ({date})" if date else name


def cmd_ask(args: argparse.Namespace) -> int:
    from nexus_assets.services.queries import ask
    from nexus_assets.services.requests import AskRequest

    if not require_utf8(args.question, "question").strip():
        raise UsageError("give a question")
    _topics(args)
    request = request_of(AskRequest, NAMES, question=args.question, topics=args.topic, **_filters(args))
    made = settings_of(args)
    user = args.user or made.current_user()
    out = ask(args.db, request, user=user, agent=args.agent, env=made.as_env()).model_dump(mode="json")
    if out["refused"]:
        text = f"refused ({out['reason']}); audit {out['audit_id'][:12]}"
    else:
        text = (
            f"{out['answer']}\n\n— {out['model']} ({out['generation']}); CCC {out['ccc']:.2f}, {out['revisions']} revisions; "
            f"ranked by {out['reranker_used']}; audit {out['audit_id'][:12]}\n"
            + "\n".join(
                f"  [{s['id'][:12]}] {'passage ' if s['kind'] == 'passage' else ''}{_conversation(s)}"
                f"{' · ' + s['run_id'] if s['run_title'] else ''} {s['json_path']} [{s['start']}:{s['end']}]"
                for s in out["sources"]
            )
        )
    emit(args, out, text)
    return 1 if out["refused"] else 0


def cmd_audit(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        rows = vault.recall.audit_rows()  # opening upgraded an older vault, so the table is there
    text = "\n".join(
        f"{r['recorded_at'][:19]} {r['outcome']:<8} {r['user_name']} via {r['agent']} {r['model']} ccc={r['ccc']} "
        f"rev={r['revisions']} bricks={len(r['brick_ids'])} q={r['question_sha256'][:12]}{' — ' + r['reason'] if r['reason'] else ''}"
        for r in rows
    ) or "no answers audited yet"
    emit(args, rows, text)
    return 0


def register(commands: Commands) -> None:
    p = commands.add("recall", cmd_recall, help="hybrid recall over the topics' bricks and every sentence of their runs; read-only")
    p.add_argument("query", nargs="?", help="what to recall (or --repl)")
    p.add_argument(
        "--repl", action="store_true", help="read one query per line from standard input and answer each, loading the model once"
    )
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    p.add_argument("--k", type=bounded(*bounds.RECALL_K), default=5, help=f"results, {bounds.RECALL_K[0]} to {bounds.RECALL_K[1]} (default 5)")
    who_and_when(p)
    p = commands.add("ask", cmd_ask, help="a grounded answer citing bricks; exit 1 when refused")
    p.add_argument("question")
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    who_and_when(p)
    p.add_argument("--user", help="who asks (default $USER)")
    p.add_argument("--agent", default="nexus-cli", help="through what (default nexus-cli)")
    commands.add("audit", cmd_audit, help="the append-only audit trail of answers and refusals")

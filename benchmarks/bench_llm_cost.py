"""What an LLM sync costs on real exports, before and after, in one run (issue 45).

Syncs the given conversation exports with one catch-all topic and `--extractor openai` against the
project's OpenAI-compatible stub on 127.0.0.1 (nexus_assets_tests/llm_server.py, answering every
request with no pointers: the cost of asking does not depend on the answer), once with an earlier
checkout of the code ("before", by default `main` as `git archive` unpacks it) and once with this
checkout ("after"), each with its own default settings. It reports, per side:

  requests                     chat completion requests the stub received
  requests_per_conversation    requests / conversations synced (target <= 1)
  chars_read_per_text_char     characters of every message sent / characters of conversation text
                               in the topic's scope (target <= 1.25); the same denominator, counted
                               with this checkout's reader, for both sides
  ..._prefix_cached            the same, counting the system message once: what a provider that
                               caches prompt prefixes bills in full
  distinct_system_prompts      1 when every request begins with the same bytes
  planned_...                  (this checkout) what `nexus plan` said before the sync: it should
                               match what the stub received

Wall time at real latency is requests / NEXUS_LLM_CONCURRENCY, so `requests` is also the time.

    python benchmarks/bench_llm_cost.py /work/realdata/*/conversations.json [--before REV] [--json]

The exports are read where they are (copied into a temporary runs folder), never copied into
the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from nexus_assets_tests.llm_server import DEFAULT_API_KEY, DEFAULT_MODEL, FakeOpenAIServer  # noqa: E402

CATCH_ALL = {
    "topic_id": "everything",
    "display_name": "Everything",
    "extraction_policy": {
        "scope_description": "Anything the conversation states: facts, decisions, preferences, plans and how-tos.",
        "exclusion_criteria": [],
    },
    "ordering_rule": "chronological",
    "state": "ACTIVE",
    "min_relevance": 0.0,
}


def make_project(root: Path, exports: list[Path]) -> tuple[Path, Path]:
    import yaml

    runs, topics = root / "runs", root / "topics"
    runs.mkdir(parents=True)
    topics.mkdir(parents=True)
    for export in exports:
        # Named after the folder it came from: several exports are all called conversations.json.
        shutil.copyfile(export, runs / f"{export.parent.name}-{export.name}")
    (topics / "everything.yaml").write_text(yaml.safe_dump(CATCH_ALL), encoding="utf-8")
    return runs, topics


def text_in_scope(runs_dir: Path, topics_dir: Path) -> tuple[int, int]:
    """(conversations, characters of text the catch-all topic admits), read by this checkout."""
    from nexus_assets.ingest.scope import in_scope_nodes
    from nexus_assets.llm.planning import current_runs
    from nexus_assets.topics.files import read_topic_files

    (topic,) = [tf.topic for tf in read_topic_files(topics_dir) if tf.topic is not None]
    runs = current_runs(runs_dir)
    chars = sum(len(text) for run in runs for _, text in in_scope_nodes(topic.extraction_policy, run, topic))
    return len(runs), chars


def planned(runs_dir: Path, topics_dir: Path) -> dict:
    """What `nexus plan` says this checkout's sync will send, before it is sent."""
    from nexus_assets import settings
    from nexus_assets.llm.chunking import token_budget_from_env
    from nexus_assets.llm.client import LLMConfig
    from nexus_assets.llm.planning import _NoCalls, current_runs, plan_topics
    from nexus_assets.topics.files import read_topic_files

    topics = [tf.topic for tf in read_topic_files(topics_dir) if tf.topic is not None]
    env = {k: v for k, v in settings.load().as_env().items() if not k.startswith(("NEXUS_LLM", "OPENAI_"))}
    config = LLMConfig(base_url="http://unused.invalid/v1", api_key="unused", model=DEFAULT_MODEL)
    _, summary = plan_topics(topics, current_runs(runs_dir), config=config, store=_NoCalls(), token_budget=token_budget_from_env(env))
    return {f"planned_{k}": summary[k] for k in ("requests_to_send", "chars_read", "chars_read_per_text_char", "cacheable_prefix_chars")}


def checkout(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(HERE), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def sync_once(source: Path, exports: list[Path], concurrency: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-llm-cost-") as tmp:
        runs, topics = make_project(Path(tmp), exports)
        conversations, text_chars = text_in_scope(runs, topics)
        plan = planned(runs, topics) if source == HERE else {}
        with FakeOpenAIServer() as server:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "OPENAI_"))}
            env |= dict(
                OPENAI_BASE_URL=server.base_url,
                OPENAI_API_KEY=DEFAULT_API_KEY,
                NEXUS_LLM_MODEL=DEFAULT_MODEL,
                NEXUS_LLM_CONCURRENCY=str(concurrency),
                NEXUS_NO_RECALL="1",
                PYTHONPATH=str(source),
            )
            args = ["--db", str(Path(tmp) / "vault.duckdb"), "sync", "--runs-dir", str(runs), "--topics-dir", str(topics)]
            done = subprocess.run(
                [sys.executable, "-m", "nexus_assets.cli", *args, "--extractor", "openai", "--json"],
                env=env, capture_output=True, text=True, cwd=str(source),
            )
            if done.returncode != 0:
                raise SystemExit(f"sync with {source} failed ({done.returncode}):\n{done.stderr[-3000:]}")
            bodies = list(server.requests)
    chars = [sum(len(m["content"]) for m in b["messages"]) for b in bodies]
    systems = [b["messages"][0]["content"] for b in bodies]
    prefix = len(systems[0]) if systems else 0
    distinct = len(set(systems))
    # Billed in full where the provider caches a shared prefix: the first request whole, then what follows it.
    cached = sum(chars) - (prefix * (len(bodies) - 1) if distinct == 1 else 0)
    return {
        "conversations": conversations,
        "text_chars": text_chars,
        "requests": len(bodies),
        "requests_per_conversation": round(len(bodies) / conversations, 3),
        "chars_read": sum(chars),
        "chars_read_per_text_char": round(sum(chars) / text_chars, 3),
        "chars_read_per_text_char_prefix_cached": round(cached / text_chars, 3),
        "system_prompt_chars": prefix,
        "distinct_system_prompts": distinct,
        "largest_request_chars": max(chars, default=0),
        **plan,  # this checkout only: `nexus plan`'s figures, made before anything was sent
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("exports", type=Path, nargs="+", help="conversation exports (e.g. a ChatGPT conversations.json)")
    parser.add_argument("--before", default="main", help="the git revision measured as 'before' (default: main)")
    parser.add_argument("--before-source", type=Path, help="a checkout to measure as 'before' instead of --before")
    parser.add_argument("--only", choices=("before", "after"))
    parser.add_argument("--each", action="store_true", help="also measure every export on its own")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    missing = [e for e in args.exports if not e.is_file()]
    if missing:
        raise SystemExit(f"export {missing[0]} does not exist")
    groups = {"all": args.exports} | ({e.parent.name: [e] for e in args.exports} if args.each and len(args.exports) > 1 else {})
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-llm-cost-before-") as before_dir:
        sources = {}
        if args.only != "after":
            sources[f"before ({args.before_source or args.before})"] = (
                args.before_source.resolve() if args.before_source else checkout(args.before, Path(before_dir))
            )
        if args.only != "before":
            sources["after (this checkout)"] = HERE
        for name, exports in groups.items():
            result[name] = {side: sync_once(source, exports, args.concurrency) for side, source in sources.items()}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, sides in result.items():
        print(f"{name}:")
        for side, figures in sides.items():
            print(f"  {side}:")
            for key, value in figures.items():
                print(f"    {key:>40}: {value}")


if __name__ == "__main__":
    main()

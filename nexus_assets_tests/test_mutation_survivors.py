"""Eight plausible bugs a mutation run found the suite did not catch (issue 51), each pinned here
by a test that fails when the bug is put back by hand (CONTRIBUTING.md, "Mutation
benchmark"). The mutation each test kills is named in its docstring."""

from __future__ import annotations

import io
import threading

import pytest

from nexus_assets.core.models import Occurrence, Topic
from nexus_assets.extract.relevance import relevance_scores, relevant
from nexus_assets.gate.quotes import _K, _SMALL_NODE, first_offsets
from nexus_assets.gate.rules import validate_pointers
from nexus_assets.ingest.formats import limits as L
from nexus_assets.ingest.formats.jsonl import read_lines
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets.ingest.formats.sessions import iter_session
from nexus_assets.llm.chunking import pack, pack_windows
from nexus_assets.recall.rerank import Candidate, rerank
from nexus_assets.relate.rules import conflict_between
from nexus_assets_tests.llm_server import FakeOpenAIServer
from nexus_assets_tests.sessions import claude_session_lines, line
from nexus_assets_tests.strategies import TOPIC

# --- 1. The gate's long-node fast path -------------------------------------------------------


def _long_node() -> str:
    """A message past the gate's `_SMALL_NODE`, so its quotes go through the hashed fast path;
    every sentence starts with the same 16 characters."""
    sentences = [f"Sentence number {i} says the sync keeps every brick verbatim." for i in range(2500)]
    node = " ".join(sentences)
    assert len(node) > _SMALL_NODE
    return node


def test_a_quote_sharing_only_its_first_16_characters_with_a_long_node_is_rejected():
    """Mutation: the fast path accepts a quote of the prefix's group without comparing the rest
    (`if candidate in quotes` → any quote of that length), so `node[start:end]`, text the
    extractor never quoted, would be stored as the brick."""
    node = _long_node()
    run = nexus_run({"run_id": "run-long", "status": "OPEN", "started_at": "2024-03-01T10:00:00Z",
                     "messages": [{"role": "user", "content": node}]})
    real = ["Sentence number 7 says the sync keeps every brick verbatim.",
            "Sentence number 1999 says the sync",
            "keeps every brick verbatim. Sentence number 2000",
            "Sentence number 2499 says the sync keeps every brick verbatim."]
    # Same first 16 characters ("Sentence number ") and the same length as a real sentence.
    forged = "Sentence number 8 says the sync drops every brick at once."
    assert forged[:_K] == real[0][:_K] and forged not in node
    raws = [{"topic_id": TOPIC, "json_path": "$.messages[0].content", "verbatim_quote": q} for q in [*real, forged]]
    occurrences, rejections = validate_pointers(raws, topic_id=TOPIC, run=run)
    assert [r.reason for r in rejections] == ["quote_not_found"]
    assert rejections[0].verbatim_quote == forged
    assert all(isinstance(o, Occurrence) for o in occurrences)
    # Every stored brick is the quote itself, lifted from where `str.find` finds it.
    assert [o.content for o in occurrences] == real
    assert [o.address.start for o in occurrences] == [node.find(q) for q in real]
    assert first_offsets(node, [*real, forged]) == {q: node.find(q) for q in [*real, forged]}


# --- 2. A blank line in a JSONL session -------------------------------------------------------


def _limits() -> L.InputLimits:
    return L.InputLimits()  # the defaults


def test_a_blank_line_in_a_session_keeps_every_later_line_address():
    """Mutation: a blank line is skipped (`continue`) instead of kept as `null`, so every later
    line moves up one and every later node's address (`$['lines'][n]…`) changes."""
    events = claude_session_lines()
    text = line(events[0]) + "\n   \n" + "".join(line(e) for e in events[1:])
    lines, problems = read_lines(io.BytesIO(text.encode()), max_line_bytes=1 << 20, max_depth=64,
                                 max_bytes=1 << 30, max_lines=1000)
    assert problems == []
    assert lines[1] is None and lines[2] is None
    assert lines[3:] == events[1:]  # line n of the file is lines[n - 1]
    run = next(iter_session(io.BytesIO(text.encode()), "session.jsonl", None, _limits()))
    by_line = [events[0], None, None, *events[1:]]  # the file's lines, 0-based
    nodes = [n for n in run.nodes if n.steps[0] == "lines"]
    assert nodes
    for node in nodes:
        # The text at a node's address is the text at that place of that line of the file.
        source = by_line[node.steps[1]]
        assert source is not None
        assert _at(source, node.steps[2:]) == _at(run.document, node.steps)
    assert max(n.steps[1] for n in nodes) >= 3  # some node lies after the blank lines


def _at(value, steps):
    for step in steps:
        value = value[step]
    return value


# --- 3. A number conflict needs the same subject ----------------------------------------------


def test_two_numbers_about_different_things_are_no_conflict():
    """Mutation: `found is not None and _same_thing(a, b)` → `found is not None`: any two texts
    sharing a word and holding different numbers would be flagged as a conflict."""
    assert conflict_between("The vault keeps 3 backups of every topic.",
                            "The vault migration took 45 minutes on the old laptop yesterday.") is None
    assert conflict_between("The marathon plan peaks at 20 miles in week 16.",
                            "The marathon shoes cost 120 dollars at the shop downtown.") is None
    # The same subject with two numbers is one.
    assert conflict_between("The sync runs every 15 minutes.", "The sync runs every 30 minutes.") == "number: 15 ≠ 30"


# --- 4. The packing boundary ------------------------------------------------------------------


def test_a_group_that_fills_its_capacity_exactly_is_one_group():
    """Mutation: `total + size > capacity` → `>=`: a request filled to exactly its budget would be
    split in two, one more LLM call than needed."""
    assert pack([2, 2], 4) == [[0, 1]]
    assert pack([2, 2, 1], 4) == [[0, 1], [2]]
    assert pack([4], 4) == [[0]]
    assert pack([3, 1, 1], 4) == [[0, 1], [2]]
    # The same through the windows' packing: two windows that together fill the budget share a request.
    budget = 1000
    from nexus_assets.llm.chunking import FRAGMENT_ENVELOPE_BYTES

    capacity = budget * 4 - FRAGMENT_ENVELOPE_BYTES
    assert pack_windows([capacity - 10, 10], token_budget=budget) == [[0, 1]]
    assert pack_windows([capacity - 10, 11], token_budget=budget) == [[0], [1]]


# --- 5. `score >= min_relevance` ----------------------------------------------------------------


def test_a_statement_exactly_at_min_relevance_is_kept():
    """Mutation: `score >= threshold` → `>`: a statement whose rounded relevance equals the topic's
    `min_relevance` would be dropped."""
    from nexus_assets.embedding.embedder import embed

    topic = Topic.model_validate({
        "topic_id": "marathon-training", "display_name": "Marathon training", "state": "ACTIVE",
        "extraction_policy": {"scope_description": "The marathon training plan: weekly runs, distances and paces."},
    })
    about = "I need 18 miles a week by August for the Dublin marathon."
    score = relevance_scores([about], topic, embed)[0]
    assert 0 < score < 1
    at = topic.model_copy(update={"min_relevance": score})
    above = topic.model_copy(update={"min_relevance": round(score + 0.001, 3)})
    assert relevant([about], at, embed) == [True]
    assert relevant([about], above, embed) == [False]


# --- 6. The PostgreSQL topic advisory lock ----------------------------------------------------


@pytest.mark.parametrize("holder", ["service", "vault"])
def test_two_writers_of_one_topic_take_turns_on_postgres(postgres_url, holder):
    """Mutation: the topic lock (`Records.topic_lock` / `exclusive`, or the sync service's
    `topic_lock`) replaced by a no-op: two syncs of one topic would write at once. A second
    holder of the same topic waits until the first lets go; another topic does not wait."""
    from nexus_assets.catalog import Catalog
    from nexus_assets.services.sync import topic_lock

    def hold(topic_id):
        if holder == "service":
            return topic_lock(postgres_url, topic_id)
        return _vault_lock(Catalog, postgres_url, topic_id)

    entered = {"same": threading.Event(), "other": threading.Event()}

    def contend(name: str, topic_id: str) -> None:
        with hold(topic_id):
            entered[name].set()

    with hold("storage-decisions"):
        same = threading.Thread(target=contend, args=("same", "storage-decisions"))
        other = threading.Thread(target=contend, args=("other", "nexus-server-sync"))
        same.start()
        other.start()
        assert entered["other"].wait(60), "a writer of another topic waited"
        # A lock that works never lets the second writer in while the first holds it.
        assert not entered["same"].wait(1.5), "a second writer of the topic got in while the first held it"
    assert entered["same"].wait(60)
    same.join(60)
    other.join(60)


def test_the_topic_lock_key_is_the_same_in_every_release(postgres_url):
    """Two releases syncing one vault take turns only if they lock the same key: a session that
    holds `nexus-topic:<id>` the way the vault takes it (another process, an older `nexus`) makes
    the vault's topic lock wait. (Kills the key's text being changed.)"""
    import psycopg

    from nexus_assets.catalog import Catalog

    entered = threading.Event()

    def contend() -> None:
        with _vault_lock(Catalog, postgres_url, "storage-decisions"):
            entered.set()

    with psycopg.connect(postgres_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", ["nexus-topic:storage-decisions"])
        waiter = threading.Thread(target=contend)
        waiter.start()
        assert not entered.wait(1.5), "the vault took the topic lock another session holds"
        other.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", ["nexus-topic:storage-decisions"])
        assert entered.wait(60)
    waiter.join(60)


class _vault_lock:
    """The vault's own topic lock on a connection of its own, held for the `with` block."""

    def __init__(self, catalog, url: str, topic_id: str) -> None:
        self.catalog, self.url, self.topic_id = catalog, url, topic_id

    def __enter__(self):
        self._open = self.catalog.open(self.url)
        vault = self._open.__enter__()
        self._lock = vault.topic_lock(self.topic_id)
        self._lock.__enter__()

    def __exit__(self, *exc):
        try:
            self._lock.__exit__(*exc)
        finally:
            self._open.__exit__(*exc)


# --- 7 and 8. Rerank scores kept with their label ---------------------------------------------


def _candidates() -> list[Candidate]:
    # The heuristic ranks these a, b, c (fused rank first); the tiers below rank them otherwise.
    texts = ["The vault lives in one DuckDB file.", "Sync runs nightly at two.", "Bricks are verbatim text units."]
    return [Candidate(brick_id=ch * 64, topic_id=TOPIC, content=t, state="FINAL", similarity=0.5, fused=f)
            for ch, t, f in zip("abc", texts, (1.0, 0.6, 0.3))]


def test_the_llm_tier_ranks_by_the_scores_the_llm_gave():
    """Mutation: the LLM reranker keeps `reranker_used="llm"` but drops the scores (`score=c.score`):
    results would say "llm" and come in the order of ties."""

    def scores(body: dict) -> dict:
        return {"scores": [0.1, 0.25, 0.9]}

    with FakeOpenAIServer(api_key=None, models=None, handler=scores) as server:
        env = {"NEXUS_RERANK_BASE_URL": server.base_url, "NEXUS_RERANK_MODEL": "reranker", "NEXUS_RERANK_API_KEY": "k"}
        ranked, notes = rerank("where does the vault live", _candidates(), env)
    assert notes == []
    assert {c.reranker_used for c in ranked} == {"llm"}
    assert [(c.brick_id[0], c.score) for c in ranked] == [("c", 0.9), ("b", 0.25), ("a", 0.1)]


@pytest.mark.slow  # loads torch: most of a minute on two busy cores
def test_the_cross_encoder_tier_ranks_by_the_model_scores(tmp_path):
    """Mutation: the cross-encoder keeps `reranker_used="cross-encoder"` but drops the model's
    scores: results would say "cross-encoder" and come in another order."""
    from sentence_transformers import CrossEncoder
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    import torch

    query = "where does the vault live"
    candidates = _candidates()
    words = sorted({w.lower().strip(".,") for c in candidates for w in c.content.split()} | set(query.split()))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]), encoding="utf-8")
    tiny = tmp_path / "tiny-cross-encoder"
    torch.manual_seed(7)
    BertForSequenceClassification(BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32, num_labels=1)).save_pretrained(tiny)
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(tiny)
    torch.manual_seed(42)  # as the tier does before it predicts
    expected = [round(float(s), 6) for s in CrossEncoder(str(tiny), device="cpu").predict([(query, c.content) for c in candidates])]
    assert all(s != 0.0 for s in expected)
    ranked, notes = rerank(query, candidates, {"NEXUS_CROSS_ENCODER": str(tiny)})
    assert notes == []
    assert {c.reranker_used for c in ranked} == {"cross-encoder"}
    by_id = {c.brick_id: s for c, s in zip(candidates, expected)}
    assert [(c.brick_id, c.score) for c in ranked] == sorted(by_id.items(), key=lambda kv: (-kv[1], kv[0]))


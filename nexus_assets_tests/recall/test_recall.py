"""docs/recall.md and invariant 16: embeddings and the vector index as assets, read-only recall with
tiered reranking, grounded answers with the CCC gate, MODE-1 and the append-only audit trail."""

import hashlib
import json
import re
import shutil
import socket

import dagster as dg
import pytest

from nexus_assets.recall.citations import ccc, extractive_answer, split_answer
from nexus_assets.embedding.embedder import MODEL
from nexus_assets.recall.index import load, vector_index_dir
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json, run_nexus
from nexus_assets_tests.dagster_helpers import materialize_topic
from nexus_assets_tests.llm_server import FakeOpenAIServer
from nexus_assets_tests.project import Project

TOPIC = "storage-decisions"
QUESTION = "Where should the vault live?"


@pytest.fixture
def synced(project: Project, capsys) -> Project:
    run_json(capsys, *project.sync_args())
    return project


def table_bytes(p: Project) -> dict:
    with Vault.open(p.db, read_only=True) as v:
        return {t: v.conn.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ("bricks", "brick_sources", "audit", "embeddings", "manifests")}


def test_the_id_map_is_one_to_one_and_survives_a_restart_and_a_rebuild(synced: Project, capsys):
    first = load(synced.db, TOPIC)
    with Vault.open(synced.db, read_only=True) as v:
        visible = [b.brick_id for b in v.bricks.select(TOPIC, visible_only=True)]
    assert first is not None and first.brick_ids == visible and first.index.ntotal == len(visible)
    # Row i of the index is brick i's own vector, as the vault stores it.
    with Vault.open(synced.db, read_only=True) as v:
        stored = dict(v.conn.execute(
            "SELECT b.brick_id, e.vector FROM bricks b JOIN embeddings e ON e.fingerprint = b.fingerprint AND e.model = ? WHERE b.topic_id = ?",
            [MODEL, TOPIC],
        ).fetchall())
    for i, brick_id in enumerate(visible):
        assert list(first.index.reconstruct(i)) == pytest.approx(stored[brick_id], abs=1e-6), brick_id
    before = run_json(capsys, *synced.cli_args(), "recall", QUESTION, "--topic", TOPIC)
    shutil.rmtree(vector_index_dir(synced.db, TOPIC))
    after = run_json(capsys, *synced.cli_args(), "recall", QUESTION, "--topic", TOPIC)
    assert [r["brick_id"] for r in after["results"]] == [r["brick_id"] for r in before["results"]]
    assert load(synced.db, TOPIC).brick_ids == visible, "rebuilt from the vault alone, same order"


def test_recall_is_read_only_and_confidences_are_in_range(synced: Project, capsys):
    before = table_bytes(synced)
    out = run_json(capsys, *synced.cli_args(), "recall", QUESTION, "--k", "4")
    assert table_bytes(synced) == before, "no audit row, no state change"
    (top, *rest) = out["results"]
    assert top["reranker_used"] == "heuristic"
    assert_in_rank_order(out["results"])
    assert all(0.0 <= r["confidence"] <= 1.0 for r in out["results"]) and len(out["results"]) == 4
    assert set(r["brick_id"] for r in out["results"]) and all(r["sources"] for r in out["results"])


def test_recall_confidence_never_rises_down_the_list(synced: Project, capsys):
    """docs/recall.md: the confidence is a mapping of the final ranking score, so in every listing (the
    --json results and the lines a person reads) it never rises from one result to the next."""
    for query in (QUESTION, "backups of the vault file", "which port does the server use", "order of bricks"):
        results = run_json(capsys, *synced.cli_args(), "recall", query, "--k", "10")["results"]
        assert len(results) >= 5, query
        confidences = [r["confidence"] for r in results]
        assert confidences == sorted(confidences, reverse=True), (query, confidences, [r["similarity"] for r in results])
        assert all(0.0 <= c <= 1.0 for c in confidences)
        code, text, _ = run_cli(capsys, *synced.cli_args(), "recall", query, "--k", "10")
        shown = [float(line.split()[1]) for line in text.splitlines() if re.match(r"\s+\d+\. ", line)]
        assert code == 0 and shown == sorted(shown, reverse=True) and len(shown) == len(results), text


def assert_in_rank_order(results: list[dict]) -> None:
    """Results come in the reranker's order, numbered from 1: best score first, ties by authority
    and then brick id; each names the message it was said in."""
    assert [r["rank"] for r in results] == list(range(1, len(results) + 1))
    keys = [(-r["rerank_score"], r["authority"], r["brick_id"]) for r in results]
    assert keys == sorted(keys)
    assert all(r["message"] == f"{r['sources'][0]['run_id']} {r['sources'][0]['json_path']}" for r in results)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tiers_fall_through_deterministically(synced: Project, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NEXUS_RERANK_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    monkeypatch.setenv("NEXUS_RERANK_MODEL", "reranker")
    monkeypatch.setenv("NEXUS_CROSS_ENCODER", str(tmp_path / "no-such-model"))
    runs = [run_json(capsys, *synced.cli_args(), "recall", QUESTION) for _ in range(2)]
    assert runs[0]["results"] == [{**r, "retrieval_timestamp": runs[0]["results"][i]["retrieval_timestamp"]} for i, r in enumerate(runs[1]["results"])]
    assert {r["reranker_used"] for r in runs[0]["results"]} == {"heuristic"}
    assert [n.split(" ")[0] for n in runs[0]["fell_through"]] == ["LLM", "cross-encoder"]

    # A real cross-encoder, loaded by the real code: a tiny one this test builds and saves.
    from sentence_transformers import CrossEncoder
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertTokenizerFast,
    )

    vocab = tmp_path / "vocab.txt"
    words = sorted({w.lower().strip(".,?:") for r in runs[0]["results"] for w in r["content"].split()} | {"where", "should", "the", "vault", "live"})
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]), encoding="utf-8")
    tiny = tmp_path / "tiny-cross-encoder"
    BertForSequenceClassification(BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32, num_labels=1)).save_pretrained(tiny)
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(tiny)
    # It loads and scores a pair (the saved model is usable), before recall is asked to use it.
    assert CrossEncoder(str(tiny), device="cpu").predict([(QUESTION, "The vault lives in one file.")]).shape == (1,)
    monkeypatch.setenv("NEXUS_CROSS_ENCODER", str(tiny))
    ranked = run_json(capsys, *synced.cli_args(), "recall", QUESTION)
    assert {r["reranker_used"] for r in ranked["results"]} == {"cross-encoder"}
    assert [n.split(" ")[0] for n in ranked["fell_through"]] == ["LLM"]

    # And the LLM tier when its endpoint answers.
    def scores(body: dict) -> dict:
        n = body["messages"][-1]["content"].count("\n") - 1
        return {"scores": [1.0 / (i + 1) for i in range(n)]}

    with FakeOpenAIServer(api_key=None, models=None, handler=scores) as server:
        monkeypatch.setenv("NEXUS_RERANK_BASE_URL", server.base_url)
        monkeypatch.setenv("NEXUS_RERANK_API_KEY", "test-key")
        by_llm = run_json(capsys, *synced.cli_args(), "recall", QUESTION)
        assert server.requests and all(r["temperature"] == 0 and r["seed"] == 42 for r in server.requests)
    assert {r["reranker_used"] for r in by_llm["results"]} == {"llm"} and by_llm["fell_through"] == []


def test_ccc_counts_sentences_with_a_valid_citation():
    ids = ["a" * 64, "b" * 64]
    parts = split_answer(f"The vault is DuckDB. [{'a' * 12}] It is fast [{'b' * 10}]. Nobody said this. Or this [{'c' * 12}].", ids)
    assert [p.cited for p in parts] == [True, True, False, False]
    assert ccc(parts) == 0.5
    assert ccc(split_answer(extractive_answer([(ids[0], "Where should the vault live?"), (ids[1], "In DuckDB")]), ids)) == 1.0


def test_the_revision_loop_stops_at_three_and_the_answer_is_refused(synced: Project, capsys, monkeypatch):
    with FakeOpenAIServer(api_key=None, models=None) as server:
        from nexus_assets_tests.llm_server import Reply

        server.script(*[Reply(content="The vault lives somewhere. It is nice.") for _ in range(4)])
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("NEXUS_LLM_MODEL", "gpt-test")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        out = run_json(capsys, *synced.cli_args(), "ask", QUESTION, "--user", "ana", "--agent", "test", expect=1)
        assert server.request_count == 4, "the first answer and three revisions"
        assert "cite no brick" in server.requests[-1]["messages"][-1]["content"]
    assert out["refused"] and out["revisions"] == 3 and out["ccc"] == 0.0 and out["answer"] is None
    (row,) = run_json(capsys, *synced.cli_args(), "audit")
    assert (row["outcome"], row["user_name"], row["agent"], row["revisions"], row["model"]) == ("refused", "ana", "test", 3, "gpt-test")
    assert "claim-citation coverage" in row["reason"]


def test_an_answer_is_grounded_audited_and_mode1_refuses_after_an_edit_or_a_deletion(synced: Project, capsys):
    out = run_json(capsys, *synced.cli_args(), "ask", QUESTION, "--topic", TOPIC)
    assert out["refused"] is False and out["ccc"] == 1.0 and out["model"] == "offline-extractive"
    assert all(s["brick_ids"] for s in out["sentences"])
    g = out["sources"][0]
    assert set(g) >= {"brick_id", "content_snippet", "run_id", "json_path", "start", "end", "viewer_url", "confidence", "retrieval_timestamp"}
    assert len(run_json(capsys, *synced.cli_args(), "audit")) == 1

    # Edit the message the first cited brick was said in.
    assert g["run_id"] == "run-2026-10-09-vault-design"
    path = synced.runs / "nexus/2026-10-09-vault-design.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    message = int(g["json_path"].split("[")[2].rstrip("]"))
    doc["messages"][message]["content"] = "Edited: " + doc["messages"][message]["content"]
    path.write_text(json.dumps(doc), encoding="utf-8")
    refused = run_json(capsys, *synced.cli_args(), "ask", QUESTION, "--topic", TOPIC, expect=1)
    assert refused["refused"] and refused["reason"].startswith("MODE-1") and g["brick_id"][:12] in refused["reason"]
    path.unlink()
    gone = run_json(capsys, *synced.cli_args(), "ask", QUESTION, "--topic", TOPIC, expect=1)
    assert "MODE-1" in gone["reason"] and "gone" in gone["reason"]
    audit = run_json(capsys, *synced.cli_args(), "audit")
    assert [r["outcome"] for r in audit] == ["answered", "refused", "refused"], "one row per answer or refusal"
    assert QUESTION not in json.dumps(audit), "the audit keeps a hash of the question, never its text"


def test_a_resync_embeds_nothing(project: Project):
    with dg.instance_for_test() as instance:
        first = materialize_topic(project, TOPIC, instance)
        again = materialize_topic(project, TOPIC, instance)
    meta = [r.asset_materializations_for_node("brick_embeddings")[0].metadata for r in (first, again)]
    # The offline extractor embedded every statement it kept (issue 40): the recall step reuses those
    # vectors, embeds whatever else is visible, and a re-sync embeds nothing.
    assert meta[0]["embedded_now"].value + meta[0]["reused"].value == meta[0]["visible_bricks"].value > 0
    assert meta[1]["embedded_now"].value == 0
    assert meta[1]["reused"].value == meta[0]["visible_bricks"].value
    checks = {e.check_name: e.passed for e in again.get_asset_check_evaluations()}
    assert checks["vector_index_in_step"] is True


def test_the_viewer_recall_box_uses_recall_and_writes_nothing(synced: Project, capsys):
    import urllib.parse
    import urllib.request

    from nexus_assets_tests.web.test_viewer import running_viewer

    before = table_bytes(synced)
    with running_viewer(synced.db) as server:
        with urllib.request.urlopen(f"{server.url}?recall={urllib.parse.quote(QUESTION)}", timeout=120) as resp:
            page = resp.read().decode("utf-8")
    assert 'data-brick-id="' in page and "ranked by heuristic" in page and QUESTION in page
    cards = page.split('class="brick recalled"')[1:]
    assert cards and not [c for c in cards if re.search(r"</a>\s*·", c)], "no `topic ·` left dangling on a card"
    shown = [float(re.search(r'<span class="badge"[^>]*>([0-9.]+)</span>', c).group(1)) for c in cards]
    assert shown == sorted(shown, reverse=True), "the confidence never rises down the cards"
    expected = run_json(capsys, *synced.cli_args(), "recall", QUESTION)["results"][0]["brick_id"]
    assert page.split('class="brick recalled" data-brick-id="')[1].split('"')[0] == expected, "best first, as `nexus recall`"
    assert table_bytes(synced) == before


def test_authority_breaks_ties_and_leads_an_answer_that_draws_on_several_levels(project: Project, capsys):
    from nexus_assets.recall.rerank import Candidate, rerank

    # Equal scores: the higher authority (level 1) first, whatever the brick ids say.
    same = dict(topic_id=TOPIC, content="The vault is one DuckDB file.", state="FORMING", similarity=0.8)
    ranked, _ = rerank("vault", [Candidate(brick_id="a" * 64, authority=3, **same), Candidate(brick_id="b" * 64, authority=1, **same)], env={})
    assert [c.authority for c in ranked] == [1, 3] and ranked[0].score == ranked[1].score

    # The kick-off run is the authoritative record; everything else stays at the default level 3.
    topic, question = "nexus-server-sync", "How does the sync compile bricks?"
    path = project.topics / f"{topic}.yaml"
    path.write_text(path.read_text(encoding="utf-8") + 'authority:\n  "*sync-kickoff*": 1\n', encoding="utf-8")
    run_json(capsys, *project.sync_args())
    recalled = run_json(capsys, *project.cli_args(), "recall", question, "--topic", topic, "--k", "40")["results"]
    kickoff = json.loads((project.runs / "nexus/2026-10-03-sync-kickoff.json").read_text(encoding="utf-8"))["run_id"]
    assert {r["authority"] for r in recalled} == {1, 3}
    assert all(r["authority"] == (1 if r["sources"][0]["run_id"] == kickoff else 3) for r in recalled)

    from nexus_assets.services.answers import ask

    # The service behind `nexus ask`, with every brick of the topic recalled (the command asks for 8).
    out = ask(project.db, question, [topic], user="ana", agent="test", k=40, env={})
    assert out["refused"] is False and {s["authority"] for s in out["sources"]} == {1, 3}
    # Said beside the answer, never inside it: the answer is its cited texts verbatim (invariant 16).
    assert out["authority_levels"] == [1, 3] and not out["answer"].startswith("From authority")
    # Every level-1 sentence comes before every level-3 one.
    level = {s["brick_id"]: s["authority"] for s in out["sources"]}
    order = [level[s["brick_ids"][0]] for s in out["sentences"] if s["brick_ids"]]
    assert order == sorted(order) and order[0] == 1, order


def test_a_large_topic_reads_its_vectors_in_order_within_the_vault_memory_limit(tmp_path, monkeypatch):
    """The index of a topic with many bricks is built from vectors streamed into their rows: sorting
    them inside DuckDB's bounded pool ran out of memory (a 200 MB export's 133k-brick topic did at
    the default 512MB; 30k vectors do at 32MB)."""
    import numpy as np

    from nexus_assets.store import Vault
    from nexus_assets.vault.address import VaultOptions, parse_address

    n = 30_000
    # NEXUS_VAULT_MEMORY=32MB, as a command hands it down: with the vault's address.
    with Vault.open(parse_address(str(tmp_path / "v.duckdb"), VaultOptions(memory="32MB"))) as v:
        # Brick i holds fingerprint fi, the vector (i, i+1, ...), and place n - i: manifest order is reversed.
        v.conn.execute(
            "INSERT INTO bricks (brick_id, topic_id, content, fingerprint, state, order_index, superseded_by, stale, first_seen, updated_at) "
            "SELECT 'b' || i, 't', 'x', 'f' || i, 'FORMING', ? - i, NULL, false, now(), now() FROM range(?) r(i)",
            [n, n],
        )
        v.conn.execute("UPDATE bricks SET state = 'SUPERSEDED', order_index = NULL WHERE brick_id = 'b7'")
        v.conn.execute(
            """INSERT INTO embeddings SELECT 'm', 'f' || i, list_transform(range(384), lambda k: (i + k)::FLOAT)::FLOAT[384], now()
               FROM range(?) r(i) WHERE i <> 5""",
            [n],
        )
        ids, vectors = v.recall.visible_vectors("t", "m")
        assert ids == v.recall.visible_embedded_ids("t", "m")
    expected = [i for i in reversed(range(n)) if i not in (5, 7)]  # 5 has no vector, 7 is not visible
    assert ids == [f"b{i}" for i in expected] and vectors.shape == (n - 2, 384) and vectors.dtype == np.float32
    assert (vectors[:, 0] == np.array(expected, dtype="float32")).all() and (vectors[:, 383] == vectors[:, 0] + 383).all()


def test_a_sentence_citing_one_recalled_brick_and_one_unknown_id_is_not_cited():
    ids = ["a" * 64, "b" * 64]
    (part,) = split_answer(f"The vault is DuckDB [{'a' * 12}] [{'d' * 12}].", ids)
    assert part.brick_ids == ("a" * 64,) and part.unknown == ("d" * 12,) and not part.cited
    # An ambiguous prefix names no one brick: it is unknown too.
    (part,) = split_answer("It is fast [abcdef01].", ["abcdef01" + "0" * 56, "abcdef01" + "1" * 56])
    assert part.unknown == ("abcdef01",) and not part.cited


def _ask_with_model(project: Project, capsys, monkeypatch, answer, *extra: str, expect: int = 1):
    """`nexus ask` against a real HTTP model that answers every request with `answer(request body)`."""
    with FakeOpenAIServer(api_key=None, models=None, handler=answer) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("NEXUS_LLM_MODEL", "gpt-test")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        out = run_json(capsys, *project.cli_args(), "ask", QUESTION, *extra, expect=expect)
    return out, server


@pytest.mark.parametrize("stranger", ["made-up", "another-topic"])
def test_an_answer_citing_an_id_that_was_not_recalled_is_refused_and_its_text_is_not_audited(synced: Project, capsys, monkeypatch, stranger):
    if stranger == "made-up":
        other = "deadbeefcafe"
    else:  # a real brick, but of a topic the question was not asked about: not recalled for it
        other = run_json(capsys, *synced.cli_args(), "bricks", "nexus-server-sync")[0]["brick_id"][:12]
    said = []

    def answer(body: dict) -> str:
        listing = body["messages"][1]["content"]
        recalled = listing.split("[", 1)[1].split("]", 1)[0]
        said.append(f"The vault is one DuckDB file [{recalled}] [{other}].")
        return said[-1]

    out, server = _ask_with_model(synced, capsys, monkeypatch, answer, "--topic", TOPIC)
    assert server.request_count == 4, "the first answer and three revisions"
    assert f"[{other}]" in server.requests[-1]["messages"][-1]["content"] and "not among the bricks" in server.requests[-1]["messages"][-1]["content"]
    assert out["refused"] and out["answer"] is None and out["ccc"] == 0.0
    assert out["reason"] == (
        "claim-citation coverage 0.00 < 0.95 after 3 revisions: 1 of 1 sentences cite an id that was not recalled for this question"
    )
    (row,) = run_json(capsys, *synced.cli_args(), "audit")
    assert row["outcome"] == "refused" and row["reason"] == out["reason"]
    assert row["answer_sha256"] == hashlib.sha256(said[-1].encode("utf-8")).hexdigest()
    assert "DuckDB file" not in json.dumps(row) and other not in json.dumps(row), "the refused answer's hash, never its text"


def test_a_refusal_for_uncited_sentences_audits_their_count_not_their_text(synced: Project, capsys, monkeypatch):
    out, _ = _ask_with_model(synced, capsys, monkeypatch, lambda body: "The vault lives somewhere. It is nice.")
    assert out["reason"] == "claim-citation coverage 0.00 < 0.95 after 3 revisions: 2 of 2 sentences cite no brick"
    (row,) = run_json(capsys, *synced.cli_args(), "audit")
    assert "lives somewhere" not in json.dumps(row) and row["answer_sha256"] == hashlib.sha256(b"The vault lives somewhere. It is nice.").hexdigest()


def test_an_answered_question_audits_the_hash_of_the_answer(synced: Project, capsys):
    out = run_json(capsys, *synced.cli_args(), "ask", QUESTION, "--topic", TOPIC)
    (row,) = run_json(capsys, *synced.cli_args(), "audit")
    assert row["outcome"] == "answered" and row["answer_sha256"] == hashlib.sha256(out["answer"].encode("utf-8")).hexdigest()


@pytest.mark.parametrize("command, what", [("ask", "question"), ("recall", "query"), ("search", "search text")])
def test_a_question_that_is_not_utf8_is_bad_usage_in_one_line(synced: Project, command, what):
    # What Python makes of a raw 0xff byte in argv (`nexus ask $'vault \xff'` in a shell).
    before = table_bytes(synced)
    done = run_nexus(*synced.cli_args(), command, "where is the vault \udcff kept")
    assert done.returncode == 2
    assert done.stderr == f"nexus: the {what} is not valid UTF-8 at byte 19 (0xff); pass it as UTF-8 text\n"
    assert table_bytes(synced) == before, "refused before anything is audited"


def test_an_audit_trail_from_before_answer_hashes_opens_and_keeps_its_rows(synced: Project, capsys):
    """The migration that adds `audit.answer_sha256`: rows audited before it keep everything and
    read as having no hash; answers after it carry one."""
    import duckdb

    from nexus_assets.vault.migrations import MIGRATIONS, schema_version

    (version,) = [m.version for m in MIGRATIONS if "answer_sha256" in m.sql]
    run_json(capsys, *synced.cli_args(), "ask", QUESTION, "--topic", TOPIC)
    with duckdb.connect(str(synced.db)) as con:
        con.execute("ALTER TABLE audit DROP COLUMN answer_sha256")
        con.execute("DELETE FROM schema_version WHERE version >= ?", [version])
        assert schema_version(con) == version - 1
        before = con.execute("SELECT * FROM audit").fetchall()
    (old,) = run_json(capsys, *synced.cli_args(), "audit")
    assert old["answer_sha256"] is None and old["outcome"] == "answered"
    with Vault.open(synced.db, read_only=True) as v:
        assert v.conn.execute("SELECT * EXCLUDE (answer_sha256) FROM audit").fetchall() == before
    out = run_json(capsys, *synced.cli_args(), "ask", QUESTION, "--topic", TOPIC)
    assert run_json(capsys, *synced.cli_args(), "audit")[1]["answer_sha256"] == hashlib.sha256(out["answer"].encode("utf-8")).hexdigest()


def test_recall_repl_answers_every_line_of_its_input_in_one_process(synced: Project):
    """`nexus recall --repl`: one answer per query line (blank lines skipped), the same results as
    single recalls, from one process that loads the model and each index once."""
    import os
    import subprocess
    import sys

    from nexus_assets_tests.project import REPO

    queries = [QUESTION, "", "why DuckDB for the vault", "checksums of the manifest"]
    proc = subprocess.run(
        [sys.executable, "-m", "nexus_assets.cli", *synced.cli_args(), "recall", "--repl", "--json", "--k", "3"],
        input="\n".join(queries) + "\n", capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=synced.root,
    )
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [a["query"] for a in answers] == [q for q in queries if q]
    single = run_nexus(*synced.cli_args(), "recall", QUESTION, "--json", "--k", "3", cwd=synced.root)
    assert [r["brick_id"] for r in answers[0]["results"]] == [r["brick_id"] for r in json.loads(single.stdout)["results"]]
    assert_in_rank_order(answers[0]["results"])
    no_query = run_nexus(*synced.cli_args(), "recall")
    assert no_query.returncode == 2 and "--repl" in no_query.stderr

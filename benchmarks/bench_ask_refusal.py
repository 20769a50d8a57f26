"""Answers that refuse (docs/recall.md): the share of unrelated questions `nexus ask` refuses and of
related ones it answers, on two question sets written by hand:

- `sample`: the shipped sample (`data/`, synced with its two ACTIVE topics);
- `pkuppens`: a real ChatGPT export (Pieter Kuppens's `conversations.json`, MIT, 192 conversations in
  English and Dutch; github.com/pkuppens/my_chat_gpt, history_download/) synced with three topics
  a person would write: his Django webshop on Google Cloud, fitness (Dutch), freelance tax (Dutch).

Related questions ask what the topic's bricks say; unrelated ones ask what nobody there talked
about (general knowledge, other hobbies), some sharing a word with the topics. Each question goes
through the service behind `nexus ask` (offline answer, no endpoint); the similarity of the best
recalled brick is printed so the bar (ANSWER_MIN_SIMILARITY) can be checked against both sides.

    python benchmarks/bench_ask_refusal.py --set sample --db VAULT [--json]
"""

from __future__ import annotations

import argparse
import json

QUESTIONS = {
    "sample": {
        "related": [
            "Where should the vault live?",
            "Why is the vault append-only?",
            "What happens when a node checksum no longer matches?",
            "How are duplicate quotes handled?",
            "What does the manifest hash prove?",
            "When does a brick become FINAL?",
            "What is a brick's source address?",
            "Can several syncs write to DuckDB at the same time?",
            "How is the manifest ordered?",
            "What happens to a pointer whose quote is not found?",
            "Are parquet exports the source of truth?",
            "How are corrections made after sealing?",
        ],
        "unrelated": [
            "what is the capital of France",
            "How do I bake sourdough bread?",
            "Who won the 2018 football world cup?",
            "What is a good stretching routine for runners?",
            "How tall is Mount Everest?",
            "What is the best way to learn Spanish?",
            "Recommend a movie for tonight",
            "How do I fix a flat bicycle tyre?",
            "What is the boiling point of water at altitude?",
            "Which vitamins are in spinach?",
            "How do I file my taxes as a freelancer?",
            "What is the weather tomorrow in Amsterdam?",
        ],
    },
    "pkuppens": {
        "related": [
            "How do I deploy the Django webshop to Cloud Run?",
            "How does Docker authenticate to Google Artifact Registry?",
            "Which database does the webshop use on Google Cloud?",
            "How are static files served for the Django site?",
            "How does the GitHub Actions workflow deploy the container?",
            "What went wrong with gcloud authentication and how was it fixed?",
            "Hoeveel eiwit moet ik per dag eten om spiermassa op te bouwen?",
            "Hoe vaak per week moet ik krachttraining doen?",
            "Hoeveel calorieen moet ik eten om vet te verliezen?",
            "Moet ik als zzp'er btw rekenen?",
            "Wat zegt de wet DBA over schijnzelfstandigheid?",
            "Wat hoort er in een offerte voor een softwareproject?",
        ],
        "unrelated": [
            "what is the capital of France",
            "How do I bake sourdough bread?",
            "Who won the 2018 football world cup?",
            "How tall is Mount Everest?",
            "Recommend a movie for tonight",
            "How do I fix a flat bicycle tyre?",
            "What is the plot of Hamlet?",
            "Which planets have rings?",
            "How do I care for an orchid?",
            "Wie schreef De Avonden?",
            "Wat is de hoofdstad van Australie?",
            "What is the best chess opening for beginners?",
        ],
    },
}


def main() -> None:
    from nexus_assets.services.answers import ANSWER_MIN_SIMILARITY, ASK_K, ask, recall

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=sorted(QUESTIONS), required=True)
    ap.add_argument("--db", required=True, help="the vault synced for that set")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    rows = []
    for kind, questions in QUESTIONS[args.set].items():
        for q in questions:
            out = ask(args.db, q, user="bench", agent="bench_ask_refusal", env={})
            best = max((r["similarity"] for r in recall(args.db, q, k=ASK_K)["results"]), default=None)
            rows.append({"kind": kind, "question": q, "refused": out["refused"], "reason": out["reason"], "best_similarity": best})
    related = [r for r in rows if r["kind"] == "related"]
    unrelated = [r for r in rows if r["kind"] == "unrelated"]
    report = {
        "set": args.set,
        "bar": ANSWER_MIN_SIMILARITY,
        "related_answered": sum(not r["refused"] for r in related) / len(related),
        "unrelated_refused": sum(r["refused"] for r in unrelated) / len(unrelated),
        "questions": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    for r in rows:
        print(f"{r['kind']:<9} {'refused ' if r['refused'] else 'answered'} {r['best_similarity']:.2f}  {r['question']}")
    print(f"{args.set}: related answered {report['related_answered']:.0%} ({len(related)}), "
          f"unrelated refused {report['unrelated_refused']:.0%} ({len(unrelated)}); bar {ANSWER_MIN_SIMILARITY}")


if __name__ == "__main__":
    main()

"""Mutation benchmark (issue 51): how many plausible bugs in the core does the test suite catch?

mutmut 3 (the `bench` extra) mutates one package at a time and runs, for each mutant, only the
tests of that package's selection that reach the mutated function. Each run happens in a copy of
the work tree under a scratch folder, so the tree itself is never mutated and two packages can run
side by side. Per package it prints killed / survived / other and the score (killed ÷ tested);
the targets are 90% for gate, core and publish and 80% elsewhere (CONTRIBUTING.md).

    python benchmarks/bench_mutation.py gate            # one package
    python benchmarks/bench_mutation.py --all           # every package, one after the other
    python benchmarks/bench_mutation.py gate --survivors  # and name each survivor
    python benchmarks/bench_mutation.py gate --before   # without the tests in MUTATION_TESTS

The machine this was tuned on has two shared cores: `--children` defaults to 2.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = "nexus_assets_tests"


@dataclass(frozen=True)
class Package:
    files: tuple[str, ...]  # globs of the source files mutated
    tests: tuple[str, ...]  # the fast tests that cover them (module names under nexus_assets_tests/)
    target: float
    functions: tuple[str, ...] = ("*",)  # globs of the mutant names counted (a part of a file)
    extra_args: tuple[str, ...] = field(default=())


# Tests written against the survivors of the first run: `--before` leaves them out.
MUTATION_TESTS = (
    "test_mutation_survivors", "test_gate_units", "test_conflict_kinds", "test_rerank_units", "test_relate_units",
    "test_core_units", "test_publish_units", "test_resolve_units", "test_formats_units", "test_llm_units",
)

PACKAGES: dict[str, Package] = {
    # The pure rules of each phase. Its store (records.py) and Dagster step are reached only through
    # whole syncs, which would cost a sync per mutant here; the sync tests cover them.
    "gate": Package(("nexus_assets/gate/quotes.py", "nexus_assets/gate/rules.py"),
                    ("test_hallucination_gate", "test_invariant_offsets", "test_gate_units", "test_mutation_survivors",
                     "test_worth_keeping.py::test_the_gate_refuses_a_pointer_into_private_reasoning_and_types_an_artifact"), 0.90),
    "core": Package(("nexus_assets/core/*",), ("test_invariant_fingerprint", "test_collector", "test_core_units"), 0.90),
    "publish": Package(("nexus_assets/publish/immutability.py", "nexus_assets/publish/manifest.py"),
                       ("test_manifest", "test_immutability", "test_publish_units"), 0.90),
    "resolve": Package(("nexus_assets/resolve/rules.py", "nexus_assets/resolve/order.py", "nexus_assets/resolve/incremental.py"),
                       ("test_canonical_order", "test_incremental_resolution", "test_uniqueness_gate", "test_resolve_units"), 0.80),
    "formats": Package(("nexus_assets/ingest/formats/jsonl.py", "nexus_assets/ingest/formats/sessions.py", "nexus_assets/ingest/formats/dispatch.py"),
                       ("test_coding_agent_sessions", "test_formats_exports", "test_formats_units", "test_mutation_survivors"), 0.80),
    "llm": Package(
        ("nexus_assets/llm/handles.py", "nexus_assets/llm/chunking.py", "nexus_assets/llm/requests.py"),
        ("test_llm_request_packing", "test_llm_units", "test_mutation_survivors"), 0.80,
    ),
    "relate": Package(("nexus_assets/relate/rules.py",), ("test_conflict_rules", "test_conflict_kinds", "test_relate_units", "test_mutation_survivors"), 0.80),
    # test_recall's other tests sync a project first: a sync per mutant.
    "rerank": Package(("nexus_assets/recall/rerank.py",),
                      ("test_recall.py::test_authority_breaks_ties_and_leads_an_answer_that_draws_on_several_levels", "test_rerank_units", "test_mutation_survivors"), 0.80),
    "relevance": Package(("nexus_assets/extract/relevance.py",),
                         ("test_worth_keeping.py::test_relevance_keeps_what_the_topic_is_about_not_a_keyword_in_passing", "test_mutation_survivors"), 0.80),
    # The PostgreSQL locks: the topic and ingestion advisory locks, and the sync's hold on a topic.
    "locks": Package(
        ("nexus_assets/vault/records.py", "nexus_assets/services/sync_parallel.py"),
        ("test_mutation_survivors",), 0.80,
        functions=("*topic_lock*", "*exclusive*"),
    ),
}


def _tree_files() -> list[str]:
    """The work tree's files as git sees them (tracked and new, not ignored)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         check=True, capture_output=True, text=True).stdout
    return [f for f in out.splitlines() if (REPO / f).is_file()]


def _selection(work: Path, package: Package, before: bool) -> list[str]:
    """The package's tests as pytest arguments, found by module name wherever they sit below the
    test package (they mirror the package: nexus_assets_tests/<phase>/test_….py)."""
    selection = []
    for test in package.tests:
        module, _, node = test.partition("::")
        module = module.removesuffix(".py")
        if before and module in MUTATION_TESTS:
            continue
        found = sorted((work / TESTS).rglob(f"{module}.py"))
        if found:
            path = found[0].relative_to(work).as_posix()
            selection.append(f"{path}::{node}" if node else path)
    return selection


def _workdir(name: str, package: Package, before: bool, scratch: Path) -> Path:
    work = scratch / name
    shutil.rmtree(work, ignore_errors=True)
    for rel in _tree_files():
        if rel.startswith(("nexus_assets/", f"{TESTS}/", "data/")) or rel in ("pyproject.toml", "README.md"):
            dest = work / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest)
    selection = _selection(work, package, before)
    config = {
        "source_paths": ["nexus_assets/"],
        "only_mutate": list(package.files),
        "also_copy": [f"{TESTS}/", "data/", "README.md"],
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q", "-x", *package.extra_args],
        "pytest_add_cli_args_test_selection": selection,
        "use_git_change_detection": False,
    }
    with (work / "pyproject.toml").open("a") as f:
        f.write("\n[tool.mutmut]\n")
        for key, value in config.items():
            f.write(f"{key} = {json.dumps(value)}\n")
    return work


def _tally(work: Path, package: Package) -> dict:
    """Killed, survived and unreached ("no tests": no test of the selection runs the function)
    mutants; the score is killed ÷ (killed + survived + unreached)."""
    from mutmut.stats import status_by_exit_code

    counts = {"killed": 0, "survived": 0, "no_tests": 0, "other": 0}
    survivors = []
    for meta in (work / "mutants").rglob("*.meta"):
        data = json.loads(meta.read_text())
        for key, code in (data.get("exit_code_by_key") or {}).items():
            if not any(fnmatch.fnmatch(key, f) for f in package.functions):
                continue
            status = status_by_exit_code[code]
            if status in ("killed", "timeout", "caught by type check"):
                counts["killed"] += 1
            elif status == "survived":
                counts["survived"] += 1
                survivors.append(key)
            elif status == "no tests":
                counts["no_tests"] += 1
                survivors.append(key + " (no test reaches it)")
            else:
                counts["other"] += 1
    tested = counts["killed"] + counts["survived"] + counts["no_tests"]
    counts["score"] = round(counts["killed"] / tested, 3) if tested else None
    counts["target"] = package.target
    return {**counts, "survivors": sorted(survivors)}


def run(name: str, *, before: bool, children: int, scratch: Path, survivors: bool) -> dict:
    package = PACKAGES[name]
    work = _workdir(name, package, before, scratch)
    if not _selection(work, package, before):
        # mutmut would run the whole suite: there is no fast test of this package to run.
        return {"package": name, "before": before, "score": 0.0, "target": package.target,
                "note": "no test in the fast selection reaches it: every mutant survives"}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CI")}
    started = time.monotonic()
    args = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)]
    if package.functions != ("*",):
        args += [f for f in package.functions]
    log = work / "mutmut.log"  # progress bars: read with `tail -c 400`
    with log.open("w") as out:
        # Its own process group: an interrupted benchmark leaves no forked mutant running.
        proc = subprocess.Popen(args, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            raise
    result = {"package": name, "before": before, "seconds": round(time.monotonic() - started), **_tally(work, package)}
    names = result.pop("survivors")
    (work / "survivors.txt").write_text("".join(f"{n}\n" for n in names))
    if survivors:
        result["survivors"] = str(work / "survivors.txt")  # `mutmut show NAME` in that folder shows each
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="*", help=f"packages to mutate: {', '.join(PACKAGES)}")
    parser.add_argument("--all", action="store_true", help="every package")
    parser.add_argument("--before", action="store_true", help="without the tests written against the survivors")
    parser.add_argument("--children", type=int, default=2)
    parser.add_argument("--survivors", action="store_true", help="name each surviving mutant")
    parser.add_argument("--scratch", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "nexus-mutation")
    args = parser.parse_args()
    # A `kill` of the benchmark ends its mutmut run too (see run()).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = list(PACKAGES) if args.all else args.packages
    if not names:
        parser.error("name a package or give --all")
    if unknown := [n for n in names if n not in PACKAGES]:
        parser.error(f"unknown package {unknown[0]!r}; one of {', '.join(PACKAGES)}")
    for name in names:
        print(json.dumps(run(name, before=args.before, children=args.children, scratch=args.scratch, survivors=args.survivors)), flush=True)


if __name__ == "__main__":
    main()

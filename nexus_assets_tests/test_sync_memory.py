"""A sync holds one topic's bricks at a time: each topic's resolved bricks are let go once it is
published, so the memory a sync needs is that of its largest topic, not of all of them.

Counted as live objects in a fresh interpreter after `nexus sync` returns, not by a clock or RSS.
"""

import json
import os
import subprocess
import sys

from nexus_assets_tests.project import sample_project

PROBE = """
import gc, json, sys
from nexus_assets.cli import main
code = main(sys.argv[1:])
gc.collect()
from nexus_assets.core.models import Brick, Occurrence, SourceAddress
alive = sum(1 for o in gc.get_objects() if isinstance(o, (Brick, Occurrence, SourceAddress)))
print(json.dumps({"code": code, "alive": alive}), file=sys.stderr)
"""


def test_no_brick_outlives_the_topic_it_was_published_in(tmp_path):
    p = sample_project(tmp_path / "proj")
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *p.sync_args(), "--json"], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
    )
    seen = json.loads(proc.stderr.strip().splitlines()[-1])
    topics = json.loads(proc.stdout)
    assert seen["code"] == 0 and len(topics) == 2 and all(t["bricks"] for t in topics)
    # Dagster keeps an in-process run's captured outputs reachable after the run; the CLI empties them.
    assert seen["alive"] == 0

"""A code location for test_deploy's run-queue test: one job whose run waits at a gate.

Each run writes `<gates>/<run_id>.started` and then waits until the test writes
`<gates>/<run_id>.go` (NEXUS_TEST_GATES names the folder), so the test decides when a run ends
and can watch what the queue does meanwhile. A sync run's length depends on the machine; a gate's
does not."""

import os
import time
from pathlib import Path

import dagster as dg

GATE_TIMEOUT_S = 180.0


@dg.op
def wait_at_gate(context: dg.OpExecutionContext) -> None:
    gates = Path(os.environ["NEXUS_TEST_GATES"])
    (gates / f"{context.run_id}.started").write_text(str(time.time()), encoding="utf-8")
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while not (gates / f"{context.run_id}.go").exists():
        if time.monotonic() > deadline:
            raise dg.Failure(f"gate {gates / context.run_id}.go was not opened within {GATE_TIMEOUT_S:.0f} s")
        time.sleep(0.1)


@dg.job
def topic_gate():
    wait_at_gate()


defs = dg.Definitions(jobs=[topic_gate])

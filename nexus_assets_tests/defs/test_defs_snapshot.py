"""The whole code location, pinned: an accidental change to the asset graph, its checks, jobs,
schedules or sensors shows in review as a snapshot diff (as dagster-open-platform does).

After an intended change: `.venv/bin/python -m pytest nexus_assets_tests/defs/test_defs_snapshot.py --snapshot-update`.
"""

import dagster as dg

from nexus_assets.definitions import defs


def _partitions(pd) -> str | None:
    if pd is None:
        return None
    return f"{type(pd).__name__}:{getattr(pd, 'name', '')}"


def code_location() -> dict:
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "kinds": sorted(node.kinds),
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "partitions": _partitions(node.partitions_def),
            "pool": node.pools and sorted(node.pools),
            "checks": sorted(c.name for c in node.check_keys),
        }
    checks = {}
    for ck in sorted(graph.asset_check_keys, key=lambda c: (c.asset_key.to_user_string(), c.name)):
        spec = graph.get_check_spec(ck)
        checks[f"{ck.asset_key.to_user_string()}:{ck.name}"] = {
            "blocking": spec.blocking,
            "partitions": _partitions(graph.get(ck).partitions_def),
        }
    jobs = {
        j.name: {
            "partitions": _partitions(j.partitions_def),
            "assets": sorted(k.to_user_string() for k in j.asset_layer.executable_asset_keys) if j.asset_layer else [],
        }
        for j in sorted(repo.get_all_jobs(), key=lambda j: j.name)
        if not j.name.startswith("__")
    }
    schedules = {
        s.name: {"cron": s.cron_schedule, "job": s.job_name, "timezone": s.execution_timezone, "default": s.default_status.value}
        for s in repo.schedule_defs
    }
    sensors = {
        s.name: {"job": s.job_name, "interval_s": s.minimum_interval_seconds, "default": s.default_status.value}
        for s in repo.sensor_defs
    }
    return {"assets": assets, "checks": checks, "jobs": jobs, "schedules": schedules, "sensors": sensors}


def test_the_code_location_matches_its_snapshot(snapshot):
    assert code_location() == snapshot


def test_every_check_of_a_topic_asset_is_partitioned_by_topic():
    location = code_location()
    partitioned = {name for name, c in location["checks"].items() if c["partitions"] == "DynamicPartitionsDefinition:topics"}
    # The record's checks are on the record's assets, which belong to runs, not topics (DESIGN §3.1).
    record = {name for name in location["checks"] if name.split(":")[-1] in ("passages_verbatim", "passage_index_in_step")}
    assert len(record) == 2 and partitioned == set(location["checks"]) - record
    assert location["sensors"]["nexus_files_sensor"]["default"] == dg.DefaultSensorStatus.RUNNING.value

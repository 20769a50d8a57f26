import dagster as dg

# One partition per compilable topic (not DRAFT); keys are topic_ids, kept by the topic sensor,
# `nexus sync` and `nexus activate`.
topics_partitions = dg.DynamicPartitionsDefinition(name="topics")

# Every run of one topic carries this tag (value: the topic_id). The run queue of a deployment
# (deploy/dagster.yaml, deploy/helm/values.yaml) limits it per unique value to one: different
# topics run at once, one topic never twice at a time.
TOPIC_TAG = "nexus/topic"


def topic_tags(topic_id: str) -> dict[str, str]:
    """The tags every run of one topic carries (the schedule's, the sensor's, `nexus sync`'s)."""
    return {TOPIC_TAG: topic_id}

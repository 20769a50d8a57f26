import dagster as dg

# One partition per compilable topic (not DRAFT); keys are topic_ids, kept by the topic sensor,
# `nexus sync` and `nexus activate`.
topics_partitions = dg.DynamicPartitionsDefinition(name="topics")

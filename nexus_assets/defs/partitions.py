import dagster as dg

# One partition per topic; keys are topic_ids, registered by the topic sensor or `nexus sync`.
topics_partitions = dg.DynamicPartitionsDefinition(name="topics")

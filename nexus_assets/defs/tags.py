"""Run tags the engine and the services share: a schedule or sensor asks for runs with these tags,
and the sync service finds its runs by them, without either importing the other."""

# The tag every Dagster run of one sync carries: how the API finds a job's runs in Dagster's records.
SYNC_JOB_TAG = "nexus/sync_job"
SYNC_TOPICS_TAG = "nexus/sync_topics"
# The topic a Dagster run compiles: a deployment's run queue lets one run per value go at a time
# (deploy/dagster.yaml), while different topics run at once.
TOPIC_TAG = "nexus/topic"

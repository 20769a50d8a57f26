"""The sync service (DESIGN §10): one home for what a sync does, whichever shell starts it —
inputs checked, topic files recorded, the "nothing changed" digest, the Dagster runs. The CLI,
the API, the MCP tools, the schedule and the sensor call it; none of them orchestrates a sync."""

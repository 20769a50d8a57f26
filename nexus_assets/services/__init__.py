"""The services (docs/architecture.md#layers): every rule a shell would otherwise repeat, once.

`sync` (what a sync does, whichever shell or the engine starts it), `queries` (what the shells read:
bricks, topics, trace, search, conflicts, verify, lineage), `answers` (`nexus recall` and `nexus ask`),
`forgetting` (one journal per tombstone), `teaching` (`nexus keep` / `nexus drop`), `vault_copy`, and
the commands only the CLI has: `evaluation` (`nexus eval`), `explaining`, `exporting` and `lifecycle`
(`nexus discover`, `activate`, `seal`).
The CLI, the API, the MCP tools and the viewer call these; a service never imports a shell."""

"""`nexus mcp` (docs/agents.md): the services as tools for agents, on the official `mcp` SDK. The
same server runs over stdio (`nexus mcp`) and over streamable HTTP at /mcp on `nexus api`."""

"""`nexus mcp` (DESIGN §10.1): the services as tools for agents, on the official `mcp` SDK. The
same server runs over stdio (`nexus mcp`) and over streamable HTTP at /mcp on `nexus api`."""

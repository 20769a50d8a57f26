"""`nexus api` (docs/agents.md): the HTTP API on FastAPI. Routes are a few lines over the services
(nexus_assets/services/queries.py, nexus_assets/services/sync.py) and answer with the models of nexus_assets/schemas.py."""

"""The numbers of the bounds every shell meets (API, MCP, CLI), so an agent, a script and a
person meet the same limit for the same thing (issue 50 item 6). Which field of which request
takes which number is declared once, in the services' typed requests (services/requests.py);
the numbers stay here, free of pydantic, because the CLI's parser shows them in --help
(docs/architecture.md, "A request's bounds")."""

from __future__ import annotations

QUESTION_CHARS = (1, 2000)  # a recall query, an ask question
SEARCH_CHARS = (1, 1000)  # search words
TOPICS = 50  # topics named in one request
TOPIC_ID_CHARS = 64
BRICK_ID_CHARS = (6, 64)  # a brick id or a unique prefix of it
RECALL_K = (1, 100)
SEARCH_LIMIT = (1, 200)
BRICKS_LIMIT = (0, 100_000)
BRICKS_OFFSET = (0, 10_000_000)
NAME_CHARS = 200  # a speaker, a user, an agent

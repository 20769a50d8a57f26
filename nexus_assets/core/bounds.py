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
BRICK_ID_CHARS = (6, 64)  # a brick id or a unique prefix of it (a passage id's too)
RECALL_K = (1, 100)
SEARCH_LIMIT = (1, 200)
BRICKS_LIMIT = (0, 100_000)
BRICKS_OFFSET = (0, 10_000_000)
NAME_CHARS = 200  # a speaker, a user, an agent

# What the writing requests take (a sync's topics, pushed messages, a forget, a teaching).
SYNC_TOPICS = 100  # topics named in one sync
SYNC_RUN_IDS = 1000  # run ids a sync job is tagged with
RUN_ID_CHARS = (1, 128)  # a pushed run's id (ingest/push.py's RUN_ID_RULE says the same)
MESSAGES = (1, 10_000)  # messages in one push
MESSAGE_ID_CHARS = (1, 256)
ROLE_CHARS = (1, 64)
REASON_CHARS = 2000  # why a run is forgotten, why a brick is kept or dropped
FORGET_RUN_ID_CHARS = (1, 256)  # a run id as recorded (also runs named by their exports)
FILE_CHARS = (1, 4096)  # a source file's path

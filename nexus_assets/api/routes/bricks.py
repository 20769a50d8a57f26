from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from nexus_assets.services import queries
from nexus_assets.services.requests import BrickLookup, SearchRequest, bounds_of
from nexus_assets.api.deps import ConfigDep
from nexus_assets.schemas import BrickOut, Lineage, Problem, SearchHit, Taught, TeachBody

router = APIRouter(tags=["bricks"])
BrickId = Annotated[str, Path(pattern=r"^[0-9a-f]{6,64}$", description="a brick id, or a unique prefix of at least 6 characters")]
NOT_FOUND = {404: {"model": Problem}, 422: {"model": Problem}}


@router.get("/v1/bricks/{brick_id}", response_model=BrickOut, responses=NOT_FOUND)
def brick(config: ConfigDep, brick_id: BrickId) -> BrickOut:
    """One brick object, as in `nexus bricks --json`."""
    return queries.brick(config.db, BrickLookup(brick_id=brick_id))


@router.get("/v1/bricks/{brick_id}/lineage", response_model=Lineage, responses=NOT_FOUND)
def lineage(config: ConfigDep, brick_id: BrickId) -> Lineage:
    """As `nexus lineage BRICK_ID --json`: file → run version → extraction → occurrence → brick → manifests."""
    return queries.lineage(config.db, BrickLookup(brick_id=brick_id))


TEACH_REFUSED = {404: {"model": Problem}, 409: {"model": Problem, "description": "a sealed topic, or a topic file that cannot be written"},
                 422: {"model": Problem}}


def _teach(config, brick_id: str, verdict: str, body: TeachBody | None) -> Taught:
    from nexus_assets.services.teaching import teach_in

    done = teach_in(config.db, config.topics_dir, brick_id, verdict, reason=body.reason if body else None, actor="api")
    return Taught(**done.as_json())


@router.post("/v1/bricks/{brick_id}/keep", response_model=Taught, responses=TEACH_REFUSED)
def keep(config: ConfigDep, brick_id: BrickId, body: TeachBody | None = None) -> Taught:
    """As `nexus keep`: the brick's text joins its topic file's `examples.keep`; the next sync selects with it."""
    return _teach(config, brick_id, "keep", body)


@router.post("/v1/bricks/{brick_id}/drop", response_model=Taught, responses=TEACH_REFUSED)
def drop(config: ConfigDep, brick_id: BrickId, body: TeachBody | None = None) -> Taught:
    """As `nexus drop`: the brick's text joins its topic file's `examples.drop`; the next sync leaves it out."""
    return _teach(config, brick_id, "drop", body)


@router.get("/v1/search", response_model=list[SearchHit], responses=NOT_FOUND)
def search(
    config: ConfigDep,
    q: Annotated[str, Query(**bounds_of(SearchRequest, "text"), description='words, or "a phrase" in quotes')],
    topic: Annotated[list[str] | None, Query(**bounds_of(SearchRequest, "topics"))] = None,
    limit: Annotated[int, Query(**bounds_of(SearchRequest, "limit"))] = 20,
) -> list[SearchHit]:
    """As `nexus search --json`: ranked full-text search (BM25) with highlights."""
    return queries.search(config.db, SearchRequest(text=q, topics=topic, limit=limit))

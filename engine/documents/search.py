"""Retrieval: BM25 over FTS5, nearest vectors through sqlite-vec, and the two fused by reciprocal rank."""

from __future__ import annotations

import heapq
import logging
import re
from collections.abc import Callable, Sequence

from engine.documents import db
from engine.documents.index import Collection, DocumentIndex, pack_vector
from engine.documents.types import SearchHit

log = logging.getLogger(__name__)

RRF_K = 60
# Each side of a hybrid search ranks this many candidates before fusing.
CANDIDATES = 50
_WORD = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i if in into is it its"
    " me my of on or our so such than that the their them then there these they this to was we were what when"
    " where which who whom why will with would you your about after before all any also".split()
)

QueryEmbedder = Callable[[str], Sequence[float]]


def fts_query(text: str) -> str | None:
    """An FTS5 MATCH expression for free text: its words, quoted, joined by OR (None when none are left)."""
    words = [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]
    if not words:
        words = _WORD.findall(text.lower())
    seen: list[str] = []
    for w in words:
        if w not in seen:
            seen.append(w)
    if not seen:
        return None
    return " OR ".join(f'"{w}"' for w in seen[:32])


def keyword_ranking(index: DocumentIndex, coll: Collection, query: str, n: int) -> list[tuple[int, float]]:
    """The ``n`` chunk ids BM25 ranks best for ``query``, with their scores (-bm25: higher is better)."""
    expr = fts_query(query)
    if expr is None:
        return []
    table = db.fts_table(coll.id)
    return index.conn.execute(
        f"SELECT rowid, -bm25({table}, 1.0, 0.6, 0.4) AS s FROM {table} WHERE {table} MATCH ? ORDER BY s DESC LIMIT ?",
        (expr, n),
    ).fetchall()


def vector_ranking(index: DocumentIndex, coll: Collection, vector: Sequence[float], n: int) -> list[tuple[int, float]]:
    """The ``n`` chunk ids nearest ``vector``, with their cosine similarity: from the collection's vectors
    held in memory when they can be, else sqlite-vec's own scan (the same answer, slower)."""
    table = db.vec_table(coll.id)
    if coll.dim is None or len(vector) != coll.dim or not db.has_table(index.conn, table):
        return []
    held = index.vectors.nearest(index.conn, coll.id, table, vector, n)
    if held is not None:
        return held
    rows = index.conn.execute(
        f"SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = ? ORDER BY distance",
        (pack_vector(vector), n),
    ).fetchall()
    return [(cid, 1.0 - d) for cid, d in rows]


def keyword_search(index: DocumentIndex, coll: Collection, query: str, k: int) -> list[SearchHit]:
    """The ``k`` chunks BM25 ranks best for ``query`` (score: -bm25, higher is better)."""
    ranked = keyword_ranking(index, coll, query, k)
    hits = _hydrate(index, [cid for cid, _ in ranked])
    return [
        _with(hits[cid], score=s, keyword_rank=rank, keyword_score=s)
        for rank, (cid, s) in enumerate(ranked, start=1)
        if cid in hits
    ]


def vector_search(index: DocumentIndex, coll: Collection, vector: Sequence[float], k: int) -> list[SearchHit]:
    """The ``k`` chunks nearest ``vector`` (score: cosine similarity)."""
    ranked = vector_ranking(index, coll, vector, k)
    hits = _hydrate(index, [cid for cid, _ in ranked])
    return [
        _with(hits[cid], score=sim, vector_rank=rank, vector_score=sim)
        for rank, (cid, sim) in enumerate(ranked, start=1)
        if cid in hits
    ]


def hybrid_search(
    index: DocumentIndex,
    coll: Collection,
    query: str,
    vector: Sequence[float],
    k: int,
    *,
    keyword: list[tuple[int, float]] | None = None,
    rrf_k: int = RRF_K,
) -> list[SearchHit]:
    """Keywords and vectors, :data:`CANDIDATES` each, fused by reciprocal rank; only the ``k`` chunks
    that make the cut are read from the database. ``keyword``: the keyword ranking, if made already."""
    n = max(CANDIDATES, k)
    if keyword is None:
        keyword = keyword_ranking(index, coll, query, n)
    nearest = vector_ranking(index, coll, vector, n)
    fused: dict[int, float] = {}
    for ranking in (keyword, nearest):
        for rank, (cid, _) in enumerate(ranking, start=1):
            fused[cid] = fused.get(cid, 0.0) + 1.0 / (rrf_k + rank)
    # a few more than k: a chunk deleted since the rankings were made drops out when read
    best = heapq.nlargest(k + 4, fused, key=fused.__getitem__)
    hits = _hydrate(index, best)
    kw = {cid: (rank, s) for rank, (cid, s) in enumerate(keyword, start=1)}
    vec = {cid: (rank, s) for rank, (cid, s) in enumerate(nearest, start=1)}
    out = []
    for cid in best:
        hit = hits.get(cid)
        if hit is None:
            continue
        k_rank, k_score = kw.get(cid, (None, None))
        v_rank, v_score = vec.get(cid, (None, None))
        out.append(
            _with(
                hit,
                score=fused[cid],
                keyword_rank=k_rank,
                keyword_score=k_score,
                vector_rank=v_rank,
                vector_score=v_score,
            )
        )
    return out[:k]


def fuse(rankings: Sequence[Sequence[SearchHit]], k: int, *, rrf_k: int = RRF_K) -> list[SearchHit]:
    """Reciprocal rank fusion: each list adds 1 / (rrf_k + rank) to a chunk's score."""
    merged: dict[int, SearchHit] = {}
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + 1.0 / (rrf_k + rank)
            old = merged.get(hit.chunk_id)
            merged[hit.chunk_id] = hit if old is None else _merge(old, hit)
    ordered = sorted(scores, key=lambda cid: scores[cid], reverse=True)[:k]
    return [_with(merged[cid], score=scores[cid]) for cid in ordered]


def search(
    index: DocumentIndex,
    coll: Collection,
    query: str,
    *,
    k: int = 5,
    embed_query: QueryEmbedder | None = None,
    mode: str = "auto",
) -> tuple[list[SearchHit], str]:
    """Search one collection; returns the hits and the mode used ("keyword", "vector" or "hybrid").

    "auto" is hybrid when the collection has vectors and a query embedder is given, else keyword: a
    collection whose embeddings are still being made is searchable by keywords at once, and so is one whose
    embedding model cannot be loaded now.

    Raises:
        InvalidRequest: an unknown mode, or a vector mode without vectors to search.
    """
    from engine.errors import HearthError, InvalidRequest

    if mode not in ("auto", "keyword", "vector", "hybrid"):
        raise InvalidRequest("The search mode is one of auto, keyword, vector or hybrid.", param="mode")
    has_vectors = coll.dim is not None and db.has_table(index.conn, db.vec_table(coll.id))
    auto = mode == "auto"
    if mode == "auto":
        mode = "hybrid" if has_vectors and embed_query is not None else "keyword"
    if mode == "keyword":
        return keyword_search(index, coll, query, k), mode
    if embed_query is None or not has_vectors:
        raise InvalidRequest(
            f"Collection '{coll.name}' has no embeddings yet; search by keywords until indexing finishes.",
            param="mode",
        )
    # the query is embedded on another thread while BM25 ranks (the embedding takes longer)
    pending = index.run_aside(embed_query, query)
    keyword = keyword_ranking(index, coll, query, max(CANDIDATES, k)) if mode == "hybrid" else None
    try:
        vector = pending.result()
    except HearthError:
        if not auto:
            raise
        log.warning("the query could not be embedded; searching %s by keywords", coll.name, exc_info=True)
        return keyword_search(index, coll, query, k), "keyword"
    if mode == "vector":
        return vector_search(index, coll, vector, k), mode
    return hybrid_search(index, coll, query, vector, k, keyword=keyword), mode


def _hydrate(index: DocumentIndex, ids: list[int]) -> dict[int, SearchHit]:
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = index.conn.execute(
        f"SELECT c.id, c.text, f.path, c.page, c.heading FROM chunks c JOIN files f ON f.id = c.file_id"
        f" WHERE c.id IN ({marks})",
        ids,
    )
    return {r[0]: SearchHit(chunk_id=r[0], text=r[1], path=r[2], page=r[3], heading=r[4], score=0.0) for r in rows}


def _with(hit: SearchHit, **changes) -> SearchHit:
    from dataclasses import replace

    return replace(hit, **changes)


def _merge(a: SearchHit, b: SearchHit) -> SearchHit:
    return _with(
        a,
        keyword_rank=a.keyword_rank or b.keyword_rank,
        keyword_score=a.keyword_score if a.keyword_score is not None else b.keyword_score,
        vector_rank=a.vector_rank or b.vector_rank,
        vector_score=a.vector_score if a.vector_score is not None else b.vector_score,
    )

"""What one generation request may ask of a local model: its choices within the model's slots, its answer
within the context (a larger ``max_tokens`` is lowered to it, and the response says so in a header).

Every dialect's generation passes through :meth:`engine.server.openai_routes._Generation.start`, which
applies both once the model is known.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request

from engine.errors import InvalidRequest
from engine.types import GenerationRequest

#: The response header that names the context a request's ``max_tokens`` was lowered to (absent when it was not).
MAX_TOKENS_CAP_HEADER = "X-Hearth-Max-Tokens-Cap"
_STATE_KEY = "max_tokens_cap"


def check_choices(n: int, *, slots: int, model: str) -> None:
    """Refuse more choices than ``model`` generates at once: the ones past its slots would wait for the others
    to end, and hold every other client's request behind them.

    Raises:
        InvalidRequest: ``n`` is over ``slots``.
    """
    if n > slots:
        raise InvalidRequest(
            f"'n' is {n} but model '{model}' generates at most {slots} answers at once; ask for at most {slots} "
            "choices, or load the model with more slots (--parallel).",
            param="n",
        )


def check_sequences(count: int, *, slots: int, max_waiting: int | None, model: str, param: str) -> None:
    """Refuse a request of more sequences (its prompts times its choices) than ``model`` runs and queues together:
    they could never all be taken, and each try would fill the queue ahead of every other client.

    Raises:
        InvalidRequest: ``count`` is over the slots and the queue.
    """
    if max_waiting is not None and count > (most := slots + max_waiting):
        raise InvalidRequest(
            f"This request asks for {count} answers (its prompts times 'n') but model '{model}' takes at most {most} "
            f"at once ({slots} generating, {max_waiting} waiting); send fewer prompts in each request.",
            param=param,
        )


def cap_max_tokens(http: Request, requests: list[GenerationRequest], n_ctx: int) -> list[GenerationRequest]:
    """``requests`` with a ``max_tokens`` over the context ``n_ctx`` lowered to it, noted for the response's
    :data:`MAX_TOKENS_CAP_HEADER` (an answer never runs past the context: its length ends it there)."""
    out = []
    for req in requests:
        asked = req.params.max_tokens
        if asked is not None and asked > n_ctx:
            req = replace(req, params=replace(req.params, max_tokens=n_ctx, min_tokens=min(req.params.min_tokens, n_ctx)))
            setattr(http.state, _STATE_KEY, n_ctx)
        out.append(req)
    return out


def default_thinking_budget(requests: list[GenerationRequest], budget: int | None) -> list[GenerationRequest]:
    """``requests`` with the server's thinking budget (``--reasoning-budget``) where they give none of their own."""
    if budget is None:
        return requests
    return [req if req.params.thinking_budget is not None else replace(req, params=replace(req.params, thinking_budget=budget))
            for req in requests]  # fmt: skip


def noted_cap(state: dict) -> int | None:
    """The context a request's ``max_tokens`` was lowered to, from its ASGI scope's ``state`` (None: it was not)."""
    return state.get(_STATE_KEY)


__all__ = ["MAX_TOKENS_CAP_HEADER", "cap_max_tokens", "check_choices", "check_sequences", "default_thinking_budget",
           "noted_cap"]

"""Who may take part in a round, and on what terms: both servers' checks of the user ids and
round sizes they are given, and server 0's door for a device's retrieval.

Party: both servers (:func:`user_list`, :func:`check_floor`, :func:`check_bound_users`); server
0 for the terms of a round it opens (:func:`round_terms`) and either server at its door
(:func:`admit`).  Pure checks over the values they are given: every refusal raises before anything changes, except that
:func:`admit` marks an admitted user in ``rnd.admitting`` (under the node's lock).

Errors: ``InvalidParameters`` (422) for a malformed request, :class:`~secemb.server.errors.Conflict`
(409) for one that does not fit the round, :class:`~secemb.server.auth.Forbidden` (403) for a
user the round refuses.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from secemb.errors import InvalidParameters, SecembError, check_float, check_int
from secemb.server.auth import Forbidden
from secemb.server.config import ServerConfig
from secemb.server.errors import Conflict
from secemb.server.rounds import Round
from secemb.server.verify import MAX_REJECTIONS

__all__ = ["RoundTerms", "admit", "check_bound_users", "check_floor", "check_participant", "round_terms", "user_list"]


def user_list(users: Any, name: str, num_users: int) -> list[int]:
    """``users`` as a list of distinct user ids in ``[0, num_users)``.

    Raises
    ------
    InvalidParameters: not a non-empty list of such ids (``name`` names the field).
    """
    if not isinstance(users, list) or not users:
        raise InvalidParameters(f"{name} must be a non-empty list of user ids")
    out = [check_int(f"{name}: a user id", u, low=0, high=num_users - 1) for u in users]
    if len(set(out)) != len(out):
        raise InvalidParameters(f"{name} has duplicate user ids")
    return out


def check_floor(n_p: int, min_users: Any, floor: int, error: type[SecembError]) -> None:
    """A round of ``n_p`` users whose aggregate needs ``min_users`` is refused (``error``)
    unless both reach this server's own ``floor`` (``cfg.min_users``), whatever the caller
    asks for."""
    if n_p < floor:
        raise error(f"a round of n_p={n_p} user(s) is refused: this server's floor is min_users={floor}")
    check_int(f"min_users (this server's floor: {floor}; n_p={n_p})", min_users, low=floor, high=n_p, error=error)


def check_bound_users(n_p: int, bound_users: int | None) -> None:
    """Bounded payloads: a round of more than ``bound_users`` users (the ``users_per_round``
    the bound is proved for; ``None``: no bound) is refused, since that many bounded uploads
    could wrap the round's sum.  Both servers check it on their own (server 0 when it opens a
    round, server 1 when it mirrors one).

    Raises
    ------
    InvalidParameters: ``n_p > bound_users``.
    """
    if bound_users is not None and n_p > bound_users:
        raise InvalidParameters(f"bounded payloads are proved for rounds of at most users_per_round={bound_users} "
                                f"users; this round would have {n_p}: open smaller rounds, or raise "
                                f"[protocol.options] users_per_round in both servers' configurations (a new "
                                f"configuration: docs/deployment.md, 'Bounded payloads')")


class RoundTerms(NamedTuple):
    """The validated terms of a round server 0 opens (:func:`round_terms`)."""

    #: the participants (``None``: the first ``n_p`` devices to retrieve)
    participants: frozenset[int] | None
    n_p: int
    deadline_s: float
    quorum: int
    min_users: int


def round_terms(cfg: ServerConfig, participants: list[int] | None, n_p: int | None, deadline_s: float | None,
                quorum: int | None, min_users: int | None) -> RoundTerms:
    """The terms of a round opened with these arguments (``None``: the default): ``n_p`` is
    the number of ``participants`` if given (an ``n_p`` given too must be that number);
    ``deadline_s`` defaults to ``cfg.deadline_s``, ``quorum`` to ``n_p``, ``min_users`` to
    ``cfg.min_users``.

    Raises
    ------
    InvalidParameters: ``n_p`` and ``participants`` that disagree; a value out of range (``n_p``
        in ``[1, num_users]``, ``deadline_s`` in ``(0, 86400]``, ``quorum`` in ``[1, n_p]``,
        ``min_users`` and ``n_p`` at least this server's floor, :func:`check_floor`).
    """
    ids = None if participants is None else frozenset(user_list(participants, "participants", cfg.num_users))
    if ids is not None:
        if n_p is not None and (type(n_p) is not int or n_p != len(ids)):  # session 30, S30-F2: was dropped
            raise InvalidParameters(f"n_p={n_p!r:.40} but {len(ids)} participants (give n_p or participants)")
        n_p = len(ids)
    n_p = check_int("n_p (or give participants)", n_p, low=1, high=cfg.num_users)
    deadline_s = check_float("deadline_s", cfg.deadline_s if deadline_s is None else deadline_s, above=0, high=86400)
    min_users = cfg.min_users if min_users is None else min_users
    check_floor(n_p, min_users, cfg.min_users, InvalidParameters)
    quorum = check_int(f"quorum (n_p={n_p})", n_p if quorum is None else quorum, low=1, high=n_p)
    return RoundTerms(ids, n_p, deadline_s, quorum, min_users)


def check_participant(rnd: Round, user: int) -> None:
    """Refuse ``user`` a message of round ``rnd`` if the round has participants and it is not
    one (:class:`Forbidden`); a round without a participant list takes any user."""
    if rnd.participants is not None and user not in rnd.participants:
        raise Forbidden(f"user {user} is not a participant of round {rnd.round_id}")


def admit(rnd: Round, user: int, rejections: dict[int, int]) -> None:
    """Let ``user`` retrieve in round ``rnd`` (under the node's lock): it joins
    ``rnd.admitting`` until its retrieval is committed or refused.

    Raises
    ------
    Forbidden: its uploads failed the servers' verification in :data:`~secemb.server.verify.MAX_REJECTIONS`
        rounds (``rejections``, per user), or the round has participants and it is not one.
    Conflict: a round without a participant list already holds ``n_p`` other users.
    """
    failed = rejections.get(user, 0)
    if failed >= MAX_REJECTIONS:
        raise Forbidden(f"user {user}'s uploads failed the servers' verification in {failed} rounds: refused until "
                        "the operator clears its strikes ('secemb admin clear-strikes')")
    check_participant(rnd, user)
    # |retrieved | admitting| without building the union: a user being committed is in both for a while
    if rnd.participants is None and user not in rnd.retrieved \
            and len(rnd.retrieved) + len(rnd.admitting.difference(rnd.retrieved)) >= rnd.n_p:
        raise Conflict(f"round {rnd.round_id} is full ({rnd.n_p} users)")
    rnd.admitting.add(user)

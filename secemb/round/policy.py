"""Policy constants every party checks: the floor on the number of users in an aggregate.

A server releases no aggregate of fewer than ``min_users`` users (``[rounds] min_users``;
docs/security.md, "The floor"), and a device refuses to take part in a round announced below
its own ``min_users``: both sides import their default and lowest value from here.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MIN_USERS", "MIN_USERS_FLOOR"]

#: the default floor on the number of users in any aggregate a server releases
DEFAULT_MIN_USERS = 10
#: the lowest floor a configuration may set: an aggregate of one user is that user's data
MIN_USERS_FLOOR = 2

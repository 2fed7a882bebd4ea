"""The ``api_tokens`` table: every statement on it, named, in one place.

The lookup (:func:`~pulse_trio.store.token.tokens.live_token`) and the CLI's
operator commands beside this module refer to these by name.
"""

from __future__ import annotations

TOKEN_COLUMNS = "token_id, role, queues, label, created_at, revoked_at, allow"
#: A token's record and digest by its digest (the unique index finds it).
BY_DIGEST = f"SELECT {TOKEN_COLUMNS}, digest FROM api_tokens WHERE digest = %s"
INSERT_TOKEN = ("INSERT INTO api_tokens (token_id, digest, role, queues, allow, label, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)")
ALL_TOKENS = f"SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, token_id"
#: Revoking twice keeps the first revocation time.
REVOKE = "UPDATE api_tokens SET revoked_at = %s WHERE token_id = %s AND revoked_at IS NULL"
BY_ID = f"SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_id = %s"
#: Which of a list of ids name a token not revoked (the periodic re-check of open sessions', a registration's own).
LIVE_IDS = "SELECT token_id FROM api_tokens WHERE token_id IN %s AND revoked_at IS NULL"

-- API tokens: workers, producers and operators authenticate with bearer
-- tokens. Only the SHA-256 digest of a token is stored; the token itself is
-- shown once, by `pulse-trio token create`.
CREATE TABLE api_tokens (
    token_id      CHAR(30)     NOT NULL PRIMARY KEY,
    digest        BINARY(32)   NOT NULL,
    role          VARCHAR(16)  NOT NULL,
    queues        JSON         NOT NULL,
    label         VARCHAR(128) NOT NULL DEFAULT '',
    created_at    DATETIME(6)  NOT NULL,
    revoked_at    DATETIME(6)  NULL,
    UNIQUE KEY api_tokens_digest (digest)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Grants: actions a token may take beyond its role, named when it is created
-- (`pulse-trio token create --role producer --queue billing --allow cancel,retry`).
-- A JSON list of action names; the queues the token is held to still apply.
ALTER TABLE api_tokens
    ADD COLUMN allow JSON NOT NULL DEFAULT '[]' AFTER queues;

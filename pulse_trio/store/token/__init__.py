"""The ``api_tokens`` table, which no chart governs: the token lookup and the CLI's token statements (``tokens``)."""

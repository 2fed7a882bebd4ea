"""Chart ``cancellation``: a cancel intent, from the request to its resolution (``intents``)."""

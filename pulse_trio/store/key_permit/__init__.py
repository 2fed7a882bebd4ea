"""Chart ``key_permit``: per-key permits with fencing tokens, and their quarantine (``permits``)."""

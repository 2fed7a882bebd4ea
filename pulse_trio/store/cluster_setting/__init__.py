"""Chart ``cluster_setting``: the settings every process must agree on (``settings``)."""

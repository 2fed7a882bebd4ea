"""Chart ``schedule``: recurring schedules and the tick that fires exactly one task (``schedules``)."""

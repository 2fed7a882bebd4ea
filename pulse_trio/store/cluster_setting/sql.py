"""Chart ``cluster_setting``: every statement its functions send, named, in one place.

The functions beside this module (``settings``) refer to these by name. A
move's own ``SET`` additions stay at its ``chart_write.move`` call.
"""

from __future__ import annotations

#: Every stored setting (``FOR_UPDATE`` appended when a change locks them).
SETTINGS = "SELECT name, value_ms, state, updated_at, updated_by FROM cluster_settings"
FOR_UPDATE = " FOR UPDATE"
#: Some settings' values, read inside the caller's transaction.
VALUES_OF = "SELECT name, value_ms FROM cluster_settings WHERE name IN %s"
#: A setting's first row, as ``chart_write.create`` inserts it.
SETTING_COLUMNS = "name, value_ms, state, updated_at, updated_by"
SETTING_ROW = "(%s, %s, {state}, %s, %s)"

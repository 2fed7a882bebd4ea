"""Browser tests of the dashboard (a package, so its fixtures end with its last test)."""

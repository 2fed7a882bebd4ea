"""The database schema: the migrations (``migrations/*.sql``, applied by ``migrate``) and their snapshot.

``schema.sql`` is every table as the migrations leave it, for a reader;
``snapshot`` writes it and the suite checks it against a migrated database.
"""

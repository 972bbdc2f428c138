"""Alembic migrations of the app's store (run in code by app.store.migrate)."""

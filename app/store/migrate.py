"""Brings the store's database to the newest schema at startup, with Alembic, in code."""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from app.store.recovery import StoreTooNew

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
# The newest revision in migrations/versions (a test keeps the two in step). A database already
# there skips importing Alembic at all, which saves a few hundred milliseconds at every launch.
HEAD_REVISION = "0010_accepted_draft_tokens"


def alembic_config(url: str):
    """An Alembic Config for the store, built in code (the package ships no alembic.ini)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url)
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply every migration up to ``revision`` to ``engine``'s database.

    Raises:
        alembic.util.CommandError: the database is newer than this app (a downgrade of Hearth).
    """
    from alembic import command

    config = alembic_config(str(engine.url))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    log.debug("store at %s", revision)


def ensure_current(engine: Engine) -> str | None:
    """Upgrade ``engine``'s database unless it is already at :data:`HEAD_REVISION`.

    Returns:
        The revision the database was at before (None: a new database).

    Raises:
        StoreTooNew: the database is at a revision this Hearth does not know (a newer one made it);
            it is left as it is.
    """
    try:
        with engine.connect() as connection:
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except OperationalError:
        version = None  # a new database: no alembic_version table yet
    if version != HEAD_REVISION:
        if version is not None and version not in known_revisions():
            raise StoreTooNew(version)
        upgrade(engine)
    return version


def known_revisions() -> set[str]:
    """Every revision in migrations/versions."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return {rev.revision for rev in script.walk_revisions()}


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()

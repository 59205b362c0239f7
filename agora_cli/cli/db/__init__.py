"""`agora db`: the database itself — its schema, row-level security, redaction and sealing.

One module per concern, each named for its commands:

- ``schema.py``   ``provision``, ``upgrade``, ``status``, ``check``, ``sql``
- ``history.py``  ``history``, ``stamp``, ``downgrade`` (the migration history, as Alembic's)
- ``backfill.py`` ``backfill`` (the proposals' discovery index)
- ``redact.py``   ``redact`` (tool I/O as keyed hashes)
- ``seal.py``     ``seal`` (a tenant's rows under its data key; the keys are ``agora keys``)
- ``rls.py``      the ``rls`` group (row-level security, PostgreSQL)
"""

from __future__ import annotations

import typer

from agora_cli.cli.db import backfill, history, redact, rls, schema, seal

__all__ = ["app"]

app = typer.Typer(
    help="Provision, upgrade, check and describe the agent schema.",
    no_args_is_help=True,
)
app.command("redact")(redact.redact)
app.command("provision")(schema.provision)
app.command("upgrade")(schema.upgrade)
app.command("status")(schema.status)
app.command("check")(schema.check)
app.command("sql")(schema.sql)
app.command("history")(history.history)
app.command("stamp")(history.stamp)
app.command("downgrade")(history.downgrade)
app.command("backfill")(backfill.backfill)
app.command("seal")(seal.seal)
app.add_typer(rls.app, name="rls")

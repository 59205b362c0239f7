"""agora's own exceptions, one tree, each with its exit code.

This module imports nothing heavy, so the command line can catch these without loading
SQLAlchemy or httpx. Driver and HTTP errors are translated into this tree once, in
``engine.py`` and ``catalog.py``, and chained with ``from``::

    AgoraError                      exit 1  the command ran; the answer is negative
    ├── NotFound                    exit 1  no such object (in that scope)
    ├── Conflict                    exit 1  the object exists with other content
    ├── SchemaDrift                 exit 1  the live schema differs from the expected one (a table
    │                                       or column a statement needs is missing, too)
    ├── ModelNotInCatalog           exit 1  a provider/model is missing, or has no price
    ├── ForwardOnlyMigration        exit 1  a downgrade of a forward-only revision
    ├── DemoRefused                 exit 1  the demo would write into a database with data
    ├── SealBroken                  exit 1  a sealed value does not open where it is stored
    ├── InvalidInput                exit 2  bad arguments, dates, limits, URLs, JSON
    │   ├── UnknownDialect          exit 2
    │   └── AmbiguousId             exit 2  a short id that starts more than one id
    └── ExternalError               exit 3  an outside system could not be reached or refused
        ├── DatabaseUnreachable     exit 3  connection refused, bad credentials, no such database
        ├── DatabaseError           exit 3  the server refused a statement
        ├── LockTimeout             exit 3  the provisioning lock, or a table's, not granted in time
        ├── MissingExtension        exit 3  a PostgreSQL extension (pgvector) is not installed
        ├── CatalogError            exit 3  the models.dev catalog could not be fetched or read
        ├── KeyUnavailable          exit 3  sealed content needs the KEK, and none is set
        └── WrongKek                exit 3  the KEK set is not the one that wrapped the keys
"""

from __future__ import annotations

__all__ = [
    "AgoraError",
    "AmbiguousId",
    "CatalogError",
    "Conflict",
    "DatabaseError",
    "DatabaseUnreachable",
    "DemoRefused",
    "ExternalError",
    "ForwardOnlyMigration",
    "InvalidInput",
    "KeyUnavailable",
    "LockTimeout",
    "MissingExtension",
    "ModelNotInCatalog",
    "NotFound",
    "SchemaDrift",
    "SealBroken",
    "UnknownDialect",
    "WrongKek",
]


class AgoraError(Exception):
    """The command ran and the answer is negative."""

    exit_code: int = 1

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class NotFound(AgoraError):
    """Not found."""


class Conflict(AgoraError):
    """The object exists with different content."""


class SchemaDrift(AgoraError):
    """The live schema differs from the expected one."""


class ModelNotInCatalog(AgoraError):
    """The model is not in the catalog, or has no price there."""


class ForwardOnlyMigration(AgoraError):
    """This migration is forward-only and cannot be downgraded."""


class DemoRefused(AgoraError):
    """The database already holds agent data; the demo replaces only a previous demo set."""


class SealBroken(AgoraError):
    """A sealed value does not open: it was sealed for another row, column or tenant, or altered."""


class InvalidInput(AgoraError):
    """Invalid input.

    ``param`` names the library parameter at fault (``lease_ms``, ``timeout``) when there is
    one: the library's message names it, and the command line shows its own flag instead.
    """

    exit_code = 2

    def __init__(self, message: str | None = None, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class UnknownDialect(InvalidInput):
    """Unknown dialect: use postgresql, mysql or sqlite."""


class AmbiguousId(InvalidInput):
    """The short id starts more than one id: give more characters.

    ``matches`` holds the ids found (at most a few: the lookup stops early).
    """

    def __init__(self, message: str | None = None, *, matches: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.matches = matches


class ExternalError(AgoraError):
    """An outside system could not be reached or refused."""

    exit_code = 3


class DatabaseUnreachable(ExternalError):
    """The database could not be reached."""


class DatabaseError(ExternalError):
    """The database refused the statement."""


class LockTimeout(ExternalError):
    """A lock (the provisioning lock, or a table's) was not granted in time."""


class MissingExtension(ExternalError):
    """A required PostgreSQL extension is not installed on the server."""


class CatalogError(ExternalError):
    """The models.dev catalog could not be fetched or read."""


class KeyUnavailable(ExternalError):
    """Sealed content needs the key-encryption key: set AGORA_KEK or AGORA_KEK_FILE."""


class WrongKek(ExternalError):
    """The key-encryption key set is not the one that wrapped the tenant keys."""

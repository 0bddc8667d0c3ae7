from callboard_core.db.base import Base, UTCDateTime, id_column, now_column
from callboard_core.db.engine import Database
from callboard_core.db.uow import UnitOfWork

__all__ = ["Base", "Database", "UTCDateTime", "UnitOfWork", "id_column", "now_column"]

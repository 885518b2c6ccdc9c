"""Exception types of doppler_lab.

Every error names the bad item and what was expected. All of them derive from
:class:`DopplerLabError` and from :class:`ValueError` where the cause is bad input, so callers
can catch either.
"""

from __future__ import annotations


class DopplerLabError(Exception):
    """Base class of every error raised by doppler_lab."""


class GraphError(DopplerLabError, ValueError):
    """A dataflow graph is malformed: a cycle, a dangling edge, a bad cost, an unknown kind."""


class FormatError(DopplerLabError, ValueError):
    """A file could not be read: names the file and, where known, the line."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f", line {line}"
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.line = line


class ClusterError(DopplerLabError, ValueError):
    """A cluster description is inconsistent (matrix shapes, negative bandwidth, unknown preset)."""


class PlacementError(DopplerLabError, ValueError):
    """A placement does not fit its graph or cluster (length, device ids, memory)."""


class SimulationError(DopplerLabError, ValueError):
    """The simulator was asked for something it cannot do (unknown semantics, bad noise)."""


class ConfigError(DopplerLabError, ValueError):
    """A configuration value is out of range or inconsistent."""


class CheckpointError(DopplerLabError, ValueError):
    """A checkpoint does not match the policy, feature layout or device count asked for."""


class ExecutorError(DopplerLabError, RuntimeError):
    """A real run failed: names the op and device where it happened."""


class RunError(DopplerLabError, RuntimeError):
    """A run of a sweep failed: names the run's configuration and the error."""


class DataError(DopplerLabError, RuntimeError):
    """A data file could not be fetched, or does not match its pinned checksum."""


class ImportModelError(DopplerLabError, ValueError):
    """A model cannot be imported: names the op and its module path, and what was expected."""


class WriteError(DopplerLabError, OSError):
    """A file could not be written (disk full, read-only, no permission): names the file and why;
    the file's previous contents, if any, are intact."""

    def __init__(self, message: str, path: str | None = None, errno: int | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.errno = errno  # type: ignore[misc]
        self.filename = path  # type: ignore[misc]

    def __str__(self) -> str:  # OSError's own would show "[Errno N] ..." from the fields above
        return self.message


class RunFolderError(DopplerLabError, RuntimeError):
    """A run folder is in use by another process, or holds files another command wrote."""

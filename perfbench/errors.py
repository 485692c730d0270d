"""The exception tree. Imports nothing; the CLI maps each class to an exit code (CONTRACTS §6)."""


class PerfbenchError(Exception):
    """Base class. `exit_code` is what the CLI exits with when this escapes a command."""

    exit_code = 1


class UsageError(PerfbenchError):
    """Bad input from the user: a malformed suite file, filter, run reference or option."""

    exit_code = 2


class DatabaseError(PerfbenchError):
    """The results database cannot be opened, migrated or written."""

    exit_code = 2


class BuildError(PerfbenchError):
    """The native library could not be built or loaded."""

    exit_code = 2


class NativeError(PerfbenchError):
    """A native kernel returned a non-zero status (its message says which argument)."""

    exit_code = 1

    def __init__(self, kernel: str, status: int, message: str):
        self.kernel = kernel
        self.status = status
        self.message = message
        super().__init__(f"{kernel}: {message} (status {status})")


class RemoteError(PerfbenchError):
    """A remote service failed (unreachable, 403, 5xx)."""

    exit_code = 5


class Interrupted(PerfbenchError):
    """The run was stopped by a signal; what finished is kept."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by signal {signum}")

"""The one exception type users can cause (bad path, bad position, corrupt index, backend down)."""


class RepocompError(Exception):
    """An error the user can act on; its message says what to do. The CLI prints it without a traceback."""


class ConfigError(RepocompError):
    """Invalid configuration: unknown keys or bad values, each named in the message."""


class IndexCorruptError(RepocompError):
    """The on-disk index is unreadable or of another format version; it is rebuilt when possible."""


class BackendError(RepocompError):
    """The LLM backend is down, slow or answered something unusable."""

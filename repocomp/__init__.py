"""repocomp: repository-level code completion (FragRel relations + iterative RepoCoder retrieval)."""

from repocomp.config.loading import load_config
from repocomp.config.schema import Config
from repocomp.errors import (
    BackendError,
    ConfigError,
    IndexCorruptError,
    IndexMissingError,
    IndexStaleError,
    IndexUnusableError,
    RepocompError,
)

__all__ = ["Config", "load_config", "RepocompError", "ConfigError", "IndexUnusableError", "IndexMissingError",
           "IndexStaleError", "IndexCorruptError", "BackendError", "Index"]


def __getattr__(name: str):  # lazy: importing the package must stay cheap for the CLI and the LSP server
    if name == "Index":
        from repocomp.index import Index

        return Index
    raise AttributeError(name)

"""The repocomp language server: inline completions from the whole repository, for any LSP editor.

`create_server()` builds a pygls server with every feature registered; `repocomp serve` runs it on stdio or TCP.
"""

from lsp_server.server import RepocompServer, create_server

__all__ = ["RepocompServer", "create_server"]

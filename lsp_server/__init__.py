"""The repocomp language server: inline completions from the whole repository, for any LSP editor.

`lsp_server.server.create_server()` builds a pygls server with every feature registered; `lsp_server.entry` is its
command line (`repocomp serve`, `python -m lsp_server`). Importing the package loads nothing else: the CLI's
startup does not pay for pygls.
"""

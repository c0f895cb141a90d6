"""Benchmark drivers of the language server, above it in the layering (they drive `lsp_server` as an editor
would and never the other way): `bench` (`repocomp bench lsp`), `replay` (`repocomp bench typing`, Neovim typing
a real file), `long_session` (`repocomp bench session`), `nvim` (a real Neovim with the documented snippet) and
`slow_backend` (a vLLM-compatible endpoint that answers slowly). `editors/` holds the editor snippets the
docs show, the editor tests load and the typing benchmark runs.
"""

vim.lsp.config("repocomp", {
  cmd = { "repocomp", "serve" },
  filetypes = { "python", "java", "javascript", "typescript", "go", "rust", "c", "cpp" },
  root_markers = { ".git", "repocomp.toml", "pyproject.toml", "package.json", "go.mod", "Cargo.toml", "pom.xml" },
  -- the backend: the repository's repocomp.toml, else the local model (`repocomp model prepare`); or choose it:
  -- init_options = { backend = { name = "vllm", vllm = { endpoints = { "http://127.0.0.1:8000" } } } },
})
vim.lsp.enable("repocomp")
-- Ghost text needs vim.lsp.inline_completion (Neovim 0.12+); on 0.11 use <C-x><C-o> (textDocument/completion).
if vim.lsp.inline_completion then
  vim.lsp.inline_completion.enable(true)
  vim.keymap.set("i", "<Tab>", function()
    if not vim.lsp.inline_completion.get() then return "<Tab>" end
  end, { expr = true, desc = "accept the repocomp completion" })
end

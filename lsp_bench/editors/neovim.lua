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
-- Where the cursor rests in normal mode (300 ms), the server prepares the completion of a line opened below it.
local rest = (vim.uv or vim.loop).new_timer()
vim.api.nvim_create_autocmd("CursorMoved", {
  callback = function(args)
    rest:stop()
    rest:start(300, 0, vim.schedule_wrap(function()
      local client = vim.lsp.get_clients({ bufnr = args.buf, name = "repocomp" })[1]
      if not client or vim.api.nvim_get_current_buf() ~= args.buf or vim.fn.mode() ~= "n" then return end
      local row = vim.api.nvim_win_get_cursor(0)[1]
      client:notify("repocomp/prefetch", { textDocument = { uri = vim.uri_from_bufnr(args.buf) },
                                           position = { line = row - 1, character = 0 } })
    end))
  end,
})

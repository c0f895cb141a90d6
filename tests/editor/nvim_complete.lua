-- Drives Neovim's built-in LSP client (0.7+) against `repocomp serve`; run by tests/test_lsp_neovim.py:
--   REPO=<repo> OUT=<json file> SERVER_CMD='["python", "-m", "repocomp", "serve"]' \
--     nvim --headless -u NONE -c 'luafile nvim_complete.lua'
-- Writes {"ready": bool, "completion": <textDocument/completion result>, "error": str} to OUT, then quits.
local repo, out = vim.env.REPO, vim.env.OUT
local result = { ready = false }

local function finish()
  vim.fn.writefile({ vim.json.encode(result) }, out)
  vim.cmd("qall!")
end

local ok, err = pcall(function()
  local initialized = false
  local client_id = vim.lsp.start_client({
    name = "repocomp",
    cmd = vim.json.decode(vim.env.SERVER_CMD),
    root_dir = repo,
    workspace_folders = { { uri = vim.uri_from_fname(repo), name = "lsp_repo" } },
    init_options = { backend = { name = "extractive" } },
    on_init = function() initialized = true end,
  })
  assert(client_id, "could not start the server")

  local lines = {
    "from shop.pricing import apply_discount, with_tax",
    "",
    "",
    "def checkout(cart, discount_percent):",
    "    subtotal = sum(price * quantity for _, price, quantity in cart.items)",
    "    discounted_total = ",
  }
  vim.cmd("edit " .. vim.fn.fnameescape(repo .. "/shop/checkout.py"))
  local buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  assert(vim.wait(20000, function() return initialized end, 50), "server did not initialize")
  vim.lsp.buf_attach_client(buf, client_id)
  local client = vim.lsp.get_client_by_id(client_id)

  -- wait until the workspace index is ready (the server's own `repocomp/stats` request)
  result.ready = vim.wait(60000, function()
    local resp = client.request_sync("repocomp/stats", {}, 2000, buf)
    if not resp or not resp.result then return false end
    for _, folder in ipairs(resp.result.folders or {}) do
      if folder.state ~= "ready" then return false end
    end
    return #(resp.result.folders or {}) > 0
  end, 200)

  local params = {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    position = { line = #lines - 1, character = #lines[#lines] },
  }
  local responses = vim.lsp.buf_request_sync(buf, "textDocument/completion", params, 20000)
  for _, resp in pairs(responses or {}) do
    result.completion = resp.result
    result.error = resp.err and vim.inspect(resp.err) or nil
  end
end)
if not ok then result.error = tostring(err) end
finish()

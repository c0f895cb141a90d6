-- Drives a real Neovim (0.12+, headless) through a plan of keystrokes, the way a user types; used by
-- `lsp_bench.nvim` (the editor tests and `repocomp bench typing`). The LSP configuration is the user's init
-- (the README's snippet), not this file. Started as
--   PLAN=<plan.json> nvim --headless -u <init.lua> -i NONE -c 'luafile nvim_driver.lua'
-- The plan: {"file": path, "line": 1-based, "col": 0-based byte, "options": buffer options, "out": result path,
-- "limit_ms": the whole run's bound, "steps": [...]}, steps:
--   {"ready": ms}                       until the repocomp client is attached, its folders indexed and its
--                                       model loaded (the server's `repocomp/stats`)
--   {"insert": true, "line": L, "col": C} enter insert mode at (L, C), the plan's (line, col) by default; a col
--                                       at or past the line's end appends (`A`); timed as a keystroke
--   {"cursor": L}                       the cursor to the end of line L, in normal mode
--   {"type": "abc", "gaps_ms": [...]}   keystrokes through nvim_input, gaps_ms[i] before key i (default 0)
--   {"ghost": ms, "expect": "..."}      until ghost text shows (text starting with `expect` when given);
--                                       records the time from the last keystroke and the text shown
--   {"key": "<Tab>"}                    one key (Neovim notation)
--   {"sleep": ms}
--   {"stats": ms}                       the server's `repocomp/stats` (waited for at most ms), kept as "stats"
-- The result: {"records": [...], "lines": buffer lines, "stats": ..., "error": message or nil}. Every wait is
-- bounded.
local plan = vim.json.decode(table.concat(vim.fn.readfile(vim.env.PLAN), "\n"))
local uv = vim.uv or vim.loop
local result = { records = {}, lines = {} }
local buf, last_key_ns = nil, uv.hrtime()

local function ms_since(t) return (uv.hrtime() - t) / 1e6 end

local function finish(err)
  result.error = err
  if buf and vim.api.nvim_buf_is_valid(buf) then result.lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false) end
  vim.fn.writefile({ vim.json.encode(result) }, plan.out)
  vim.cmd("qall!")
end

local function ghost_text()
  local ns = vim.api.nvim_get_namespaces()["nvim.lsp.inline_completion"]
  if not ns then return nil end
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
    local parts = {}
    for _, chunk in ipairs(mark[4].virt_text or {}) do parts[#parts + 1] = chunk[1] end
    for _, vline in ipairs(mark[4].virt_lines or {}) do
      local l = {}
      for _, chunk in ipairs(vline) do l[#l + 1] = chunk[1] end
      parts[#parts + 1] = "\n" .. table.concat(l)
    end
    local text = table.concat(parts)
    if text ~= "" then return text end
  end
  return nil
end

local function client()
  return vim.lsp.get_clients({ bufnr = buf, name = "repocomp" })[1]
end

-- poll `check` every 10 ms until it returns true or `timeout_ms` passes, then call `done(ok)`
local function poll(timeout_ms, check, done)
  local started = uv.hrtime()
  local function tick()
    local ok, value = pcall(check)
    if not ok then return finish(tostring(value)) end
    if value then return done(true) end
    if ms_since(started) > timeout_ms then return done(false) end
    vim.defer_fn(tick, 10)
  end
  tick()
end

local run_step
local function next_step(i) vim.schedule(function() run_step(i + 1) end) end

local function index_ready(c, callback)
  c:request("repocomp/stats", {}, function(_, res)
    local folders = res and res.folders or {}
    local ready = #folders > 0 and (res.backends_loading or 0) == 0
    for _, f in ipairs(folders) do ready = ready and f.state == "ready" end
    callback(ready)
  end, buf)
end

run_step = function(i)
  local step = plan.steps[i]
  if step == nil then return finish(nil) end
  if step.ready then
    local asked, ready = false, false
    poll(step.ready, function()
      local c = client()
      if c and c.initialized and not asked then
        asked = true
        index_ready(c, function(ok) ready = ok; asked = false end)
      end
      return ready
    end, function(ok)
      if not ok then return finish("the repocomp server did not attach and index within " .. step.ready .. " ms") end
      next_step(i)
    end)
  elseif step.insert then
    local row, col = step.line or plan.line, step.col or plan.col
    local line = vim.api.nvim_buf_get_lines(buf, row - 1, row, true)[1]
    if col >= #line then
      vim.api.nvim_win_set_cursor(0, { row, math.max(0, #line - 1) })
      vim.api.nvim_input("A")
    else
      vim.api.nvim_win_set_cursor(0, { row, col })
      vim.api.nvim_input("i")
    end
    last_key_ns = uv.hrtime()
    next_step(i)
  elseif step.cursor then
    local line = vim.api.nvim_buf_get_lines(buf, step.cursor - 1, step.cursor, true)[1]
    vim.api.nvim_win_set_cursor(0, { step.cursor, math.max(0, #line - 1) })
    next_step(i)
  elseif step.type then
    local chars, gaps, k = vim.fn.split(step.type, "\\zs"), step.gaps_ms or {}, 0
    local function key()
      k = k + 1
      if k > #chars then return next_step(i) end
      vim.defer_fn(function()
        local ch = chars[k]
        vim.api.nvim_input(ch == "\n" and "<CR>" or ch == "<" and "<lt>" or ch)
        last_key_ns = uv.hrtime()
        key()
      end, gaps[k] or 0)
    end
    key()
  elseif step.ghost then
    local shown
    poll(step.ghost, function()
      shown = ghost_text()
      return shown ~= nil and (step.expect == nil or vim.startswith(shown, step.expect))
    end, function(ok)
      table.insert(result.records, { ghost = ok, text = shown or "", latency_ms = ms_since(last_key_ns) })
      next_step(i)
    end)
  elseif step.set_line then
    vim.api.nvim_buf_set_lines(buf, step.set_line - 1, step.set_line, true, { step.text })
    next_step(i)
  elseif step.key then
    vim.api.nvim_input(step.key)
    last_key_ns = uv.hrtime()
    next_step(i)
  elseif step.sleep then
    vim.defer_fn(function() next_step(i) end, step.sleep)
  elseif step.stats then
    local c, got = client(), false
    if not c then return finish("no repocomp client to ask for its stats") end
    c:request("repocomp/stats", {}, function(_, res) result.stats = res; got = true end, buf)
    poll(step.stats, function() return got end, function(ok)
      if not ok then return finish("the server did not answer repocomp/stats within " .. step.stats .. " ms") end
      next_step(i)
    end)
  else
    finish("unknown step " .. vim.inspect(step))
  end
end

local ok, err = pcall(function()
  vim.cmd("edit " .. vim.fn.fnameescape(plan.file))
  buf = vim.api.nvim_get_current_buf()
  for name, value in pairs(plan.options) do vim.bo[buf][name] = value end
end)
if not ok then return finish(tostring(err)) end
vim.defer_fn(function() finish("the plan did not finish within " .. plan.limit_ms .. " ms") end, plan.limit_ms)
run_step(1)

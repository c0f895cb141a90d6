"""TypeScript, Java, Go and Rust end to end: the language server completes an unsaved buffer of each from a sibling
file (extractive backend, a real pytest-lsp client), and `repocomp complete --explain` names the definition the
code before the cursor calls, resolved through the language's imports, packages or types."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from lsp_helpers import end_of, initialize, inline, open_doc, wait_ready
from pytest_lsp import LanguageClient

# language -> (sibling files, the buffer's path, the buffer up to the cursor, the expected completion)
CASES: dict[str, tuple[dict[str, str], str, str, str]] = {
    "typescript": (
        {"web/mod.ts": "export function scale(items: number[], factor: number): number[] {\n"
                       "  const out = items.map((x) => x * factor);\n  return out.filter((x) => x > 0);\n}\n"},
        "web/app.ts",
        "import * as m from './mod';\n\nexport function run(items: number[], factor: number): number[] {\n"
        "  const doubled = m.scale(items, 2);\n  const out = doubled.map((x) => x * factor);\n  return ",
        "out.filter((x) => x > 0);"),
    "java": (
        {"java/com/x/Ledger.java": "package com.x;\n\npublic class Ledger {\n"
                                   "  public long total(long subtotal, long tax) {\n    long sum = subtotal + tax;\n"
                                   "    return Math.max(sum, 0);\n  }\n}\n"},
        "java/com/x/Main.java",
        "package com.x;\n\nclass Main {\n  private Ledger ledger;\n\n  long run(long subtotal, long tax) {\n"
        "    long base = ledger.total(subtotal, 1);\n    long sum = subtotal + tax;\n    return ",
        "Math.max(sum, 0);"),
    "go": (
        {"go/pkg/cmd.go": "package pkg\n\ntype Command struct {\n\tName string\n}\n\n"
                          "func (c *Command) Execute(args []string) error {\n\tfor _, a := range args {\n"
                          "\t\tc.Name = strings.TrimSpace(a)\n\t}\n\treturn nil\n}\n"},
        "go/pkg/use.go",
        "package pkg\n\nfunc run(c *Command, args []string) error {\n\tif err := c.Execute(args); err != nil {\n"
        "\t\treturn err\n\t}\n\tfor _, a := range args {\n\t\tc.Name = ",
        "strings.TrimSpace(a)"),
    "rust": (
        {"rs/src/lib.rs": "pub mod value;\npub mod make;\n",
         "rs/src/value.rs": "pub struct Value {\n    pub n: i64,\n}\n\nimpl Value {\n"
                            "    pub fn new(n: i64) -> Self {\n        let n = n.max(0).min(1_000);\n"
                            "        Value { n }\n    }\n}\n"},
        "rs/src/make.rs",
        "use crate::value::Value;\n\npub fn make(n: i64) -> Value {\n    let v = Value::new(n);\n"
        "    let n = n.max(0).min(1_000);\n    ",
        "Value { n }"),
}
# language -> a line of the definitions table `--explain` prints for the buffer
DEFINITION = {"typescript": "scale (function)  web/mod.ts", "java": "total (method)", "go": "Execute (method)",
              "rust": "new (method)"}


def _repo(tmp_path: Path, language: str) -> tuple[Path, Path, str, str]:
    files, path, buffer, expected = CASES[language]
    repo = tmp_path / f"{language}_repo"
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    (repo / "repocomp.toml").write_text('[backend]\nname = "extractive"\n')
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    return repo, repo / path, buffer, expected


@pytest.mark.parametrize("language", sorted(CASES))
async def test_the_server_completes_a_buffer_from_a_sibling_file(client: LanguageClient, tmp_path: Path,
                                                                 language: str) -> None:
    repo, file, buffer, expected = _repo(tmp_path, language)
    await initialize(client, repo)
    await wait_ready(client)
    uri = open_doc(client, file, buffer)
    assert (await inline(client, uri, end_of(buffer))).strip() == expected


@pytest.mark.parametrize("language", sorted(CASES))
def test_explain_names_the_definition_the_code_calls(tmp_path: Path, language: str) -> None:
    repo, file, buffer, _ = _repo(tmp_path, language)
    file.write_text(buffer + "\n")
    line = buffer.count("\n")  # the line before the cursor's: the call to the sibling's definition is above it
    proc = subprocess.run([sys.executable, "-m", "repocomp", "complete", f"{file}:{line}", "--explain"],
                          capture_output=True, text=True, timeout=120, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout[proc.stdout.index("definitions (final round"):]
    assert DEFINITION[language] in table, proc.stdout

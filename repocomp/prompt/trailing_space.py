"""The space at the end of a prompt: left out of the prompt, taken off the answer.

A prompt ending in `x = ` asks a BPE model to continue after a space that its tokenizer would have merged into
the next word (` currency`): models then write something unusual (`0`). Ending at `x =` and dropping the same
space from the answer lets the model pick the merged token. Pure indentation is left alone.
"""

from __future__ import annotations

__all__ = ["drop_space", "split_trailing_space"]


def split_trailing_space(prompt: str) -> tuple[str, str]:
    """(prompt without the spaces after the cursor line's code, those spaces)."""
    line = prompt.rpartition("\n")[2]
    stripped = line.rstrip(" \t")
    if not stripped.strip() or stripped == line:
        return prompt, ""
    return prompt[: len(prompt) - (len(line) - len(stripped))], line[len(stripped):]


def drop_space(text: str, space: str) -> str:
    if space and text.startswith(space):
        return text[len(space):]
    return text.lstrip(" \t") if space else text

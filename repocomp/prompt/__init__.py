"""The prompt and the answer: the buffer cut at the cursor, the RepoCoder layout under a token budget (with
fill-in-the-middle where it reads the code after the cursor), the block order that keeps consecutive prompts'
prefixes, and the model's continuation cut to what the editor inserts."""

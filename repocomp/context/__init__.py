"""The context a prompt carries from the repository: similar code retrieved (sparse similarity, FragRel's
relation-aware score, whether to show it at all) and the definitions the code before the cursor uses (ranked, rendered
as compact blocks, paged in for a draft)."""

"""The index of a repository: its files walked and parsed (`walk`, `ignore`), 20-line fragments (`fragments`,
`fragment_store`), the code graph's relations kept up to date (`relation_upkeep`), the term index for sparse
similarity (`term_index`), and the file on disk (`store`, `codec`, `trust`). `Index` (in `index`) holds them
together and updates them; `building` builds it and brings a stored one up to date with the disk (`catch_up`),
`persistence` saves and loads it; `records` holds its plain records; `warm_kernels` readies its compiled kernels
ahead of a loaded index's first edit."""

from repocomp.index.building import catch_up
from repocomp.index.index import Index
from repocomp.index.records import FileEntry, IndexSummary
from repocomp.index.warm import warm_kernels

__all__ = ["FileEntry", "Index", "IndexSummary", "catch_up", "warm_kernels"]

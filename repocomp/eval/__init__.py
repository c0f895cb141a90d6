"""Batch RepoEval evaluation: RepoCoder-exact metrics, task loading and making, the batch runner, reports."""

from repocomp.eval.metrics import edit_similarity, exact_match, levenshtein
from repocomp.eval.tasks import Task, load_tasks, make_tasks, write_tasks

__all__ = ["Task", "load_tasks", "make_tasks", "write_tasks", "exact_match", "edit_similarity", "levenshtein"]

"""The backends by name: the one table a runtime is added to (its module, and a line here).

It imports nothing, so the configuration's schema checks `[backend] name` against it without importing a backend.
"""

__all__ = ["AUTO_RUNTIMES", "BACKENDS", "NO_MODEL"]

# A backend's name -> its module and class. Adding a runtime is its module and one line here.
BACKENDS = {
    "extractive": ("repocomp.backends.extractive", "ExtractiveBackend"),
    "vllm": ("repocomp.backends.vllm", "VLLMBackend"),
    "transformers": ("repocomp.backends.hf", "TransformersBackend"),
    "llamacpp": ("repocomp.backends.llama_cpp", "LlamaCppBackend"),
    "openvino": ("repocomp.backends.openvino", "OpenVINOBackend"),
}
# The in-process runtimes `[backend] name = "auto"` runs the prepared local model with: the first that runs it
# here (each class's `runs_here`); OpenVINO GenAI answers sooner than transformers on a CPU with the same answers
# within noise (docs/performance.md, docs/evaluation.md). The last is the one to name when none does.
AUTO_RUNTIMES = ("openvino", "transformers")
NO_MODEL = "extractive"  # what "auto" answers with where no local model is prepared

"""llama.cpp's library, loaded from the `llama-cpp-cffi` wheel's compiled module: only the C library is used.

Why that wheel: it is the one prebuilt llama.cpp on PyPI that loads on this project's reference machines (glibc
2.36; `llama-cpp-py-sync` needs 2.38, and building `llama-cpp-python` from source takes tens of minutes on two
cores). Its Python package is someone else's code and pins transformers < 5: it is installed without its
dependencies (`pip install --no-deps llama-cpp-cffi==0.4.42`, docs/backends.md) and never imported; its compiled
CPU module (`llama/_llama_cpp_cpu*.so`, a cffi extension holding llama.cpp's C API) is found through the
distribution's file list and loaded by path.

The module was built against a newer libstdc++ than Debian 12's: it names `__cxa_call_terminate` (GCC 14), called
only when a C++ exception escapes a `noexcept` function, which ends the process anyway. Symbols are bound lazily
(RTLD_LAZY) so that the module loads; everything llama.cpp calls on the way here resolves.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repocomp.errors import BackendError

__all__ = ["DISTRIBUTION", "INSTALL_HINT", "Runtime", "library_path", "load"]

DISTRIBUTION = "llama-cpp-cffi"
VERSION = "0.4.42"  # the version whose C API (llama.cpp's `llama_kv_self_*` era) this backend calls
INSTALL_HINT = (f"pip install 'repocomp[llamacpp]' && pip install --no-deps {DISTRIBUTION}=={VERSION} "
                "(its own Python dependencies are not needed: only its compiled library is loaded)")
_MODULE = re.compile(r"(^|/)llama/_llama_cpp_cpu\.[^/]*\.so$")
_LOAD_LOCK = threading.Lock()


@dataclass(frozen=True)
class Runtime:
    lib: Any  # the module's C functions
    ffi: Any  # its cffi FFI: C types, buffers


def library_path() -> Path:
    """The compiled CPU module of the installed `llama-cpp-cffi`, found through its file list (never imported)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise BackendError(f"the llamacpp backend needs llama.cpp's library: {INSTALL_HINT}") from None
    found = [f for f in dist.files or [] if _MODULE.search(str(f))]
    if not found:
        raise BackendError(f"{DISTRIBUTION} {dist.version} has no CPU module (llama/_llama_cpp_cpu*.so); "
                           f"reinstall it: pip install --no-deps --force-reinstall {DISTRIBUTION}=={VERSION}")
    return Path(str(found[0].locate()))


@functools.cache
def load() -> Runtime:
    """llama.cpp's C API, loaded once per process, its log silenced (it would write every load's tensor table
    to stderr, which is the language server's log)."""
    if importlib.util.find_spec("_cffi_backend") is None:
        raise BackendError(f"the llamacpp backend needs cffi: {INSTALL_HINT}")
    path = library_path()
    spec = importlib.util.spec_from_file_location("_llama_cpp_cpu", path)
    assert spec is not None and spec.loader is not None  # a file location always gives both
    with _LOAD_LOCK:
        flags = sys.getdlopenflags()
        sys.setdlopenflags(os.RTLD_LAZY)
        try:
            module = importlib.util.module_from_spec(spec)  # the dlopen
            spec.loader.exec_module(module)
        except ImportError as exc:
            raise BackendError(f"cannot load llama.cpp's library {path}: {exc}") from None
        finally:
            sys.setdlopenflags(flags)
    lib, ffi = module.lib, module.ffi

    @ffi.def_extern(name="llama_cpp_cffi_ggml_log_callback")
    def _quiet(level: Any, text: Any, user_data: Any) -> None:
        return None

    lib.llama_log_set(lib.llama_cpp_cffi_ggml_log_callback, ffi.NULL)
    lib.llama_backend_init()
    return Runtime(lib, ffi)

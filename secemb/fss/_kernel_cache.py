"""numba's on-disk cache of the kernels, invalidated by the modules they depend on (internal).

numba keeps a cached function's machine code while the function's own source file is unchanged
(its contents, bytecode, signature and target: an entry of the index for each CPU name and LLVM
feature string, so that the code for the target ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` name
lies next to this CPU's and never replaces it, :func:`secemb.fss.kernels.host_cpu_features`): a
kernel that inlines an intrinsic from another module keeps its cached code when only that module
changes.  So after an edit or an upgrade that
changes only :mod:`secemb.fss._aesni` (the AES intrinsics), the walk, the conversions and the
check would run the old intrinsics' code from the cache (found in session 28: a stale cache of
``convert_accumulate`` gave wrong sums until it was cleared).

Importing this module registers, ahead of numba's own, cache locators for the modules named in
:data:`DEPENDENCIES`: the same places as numba's (a ``NUMBA_CACHE_DIR``, the package's
``__pycache__``, the user-wide cache), and a source stamp that also covers the contents of the
modules each depends on, so a change to any of them compiles its kernels again.  The kernel
modules import it before their kernels are decorated.  A numba without the locator list this
relies on (``CacheImpl._locator_classes``) gets nothing registered; ``tests/fss/test_s28_kernel_cache.py``
fails there.
"""

from __future__ import annotations

import os
from typing import Any

from numba.core import caching

__all__ = ["DEPENDENCIES", "dependency_stamp"]

#: kernel module file -> the files of this package whose code its kernels compile in (intrinsics)
DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "_numba_kernels.py": ("_aesni.py",),
    "_sketch_kernels.py": ("_aesni.py",),
    "_sketchproof_kernels.py": ("_sketch_kernels.py",),
    "_sketch_device_kernels.py": ("_sketch_kernels.py", "_aesni.py", "_rangeproof_kernels.py"),
    "_sketch_seed_kernels.py": ("_shani.py", "_keccak.py", "_sketch_device_kernels.py", "_sketch_kernels.py",
                                "_aesni.py", "_rangeproof_kernels.py"),
}


def dependency_stamp(py_file: str) -> tuple[bytes, ...]:
    """The SHA-256 of each file :data:`DEPENDENCIES` names for the kernel module ``py_file``,
    read from ``py_file``'s directory (numba's own content hash, memoized by mtime and size)."""
    out = []
    for name in DEPENDENCIES[os.path.basename(py_file)]:
        path = os.path.join(os.path.dirname(py_file), name)
        st = os.stat(path)
        out.append(caching._hash_source_file(path, st.st_mtime, st.st_size))
    return tuple(out)


def _with_dependencies(base: type) -> type:
    """A subclass of numba's locator ``base`` for :data:`DEPENDENCIES`' modules only, whose
    source stamp is ``(numba's stamp, dependency_stamp(file))``."""

    def from_function(cls: type, py_func: Any, py_file: str) -> Any:
        deps = DEPENDENCIES.get(os.path.basename(py_file))
        if deps is None or not all(os.path.exists(os.path.join(os.path.dirname(py_file), d)) for d in deps):
            return None
        return base.from_function.__func__(cls, py_func, py_file)  # type: ignore[attr-defined]

    def get_source_stamp(self: Any) -> Any:
        return (base.get_source_stamp(self), dependency_stamp(self._py_file))  # type: ignore[attr-defined]

    return type(f"Secemb{base.__name__}", (base,), {
        "from_function": classmethod(from_function), "get_source_stamp": get_source_stamp,
        "__doc__": f"numba's {base.__name__}, stamped with the kernel module's dependencies too."})


def _register() -> None:
    impl = getattr(caching, "CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if not isinstance(classes, list) or any(c.__name__.startswith("Secemb") for c in classes):
        return
    bases = [getattr(caching, n, None) for n in ("UserProvidedCacheLocator", "InTreeCacheLocator",
                                                  "UserWideCacheLocator")]
    classes[:0] = [_with_dependencies(b) for b in bases if b is not None]


_register()

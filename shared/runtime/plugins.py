"""Registries filled by importing the modules of a package once: executors, tool families, databases."""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Collection


class PackageModules:
    """Imports every module of a package once (thread-safe); their imports register what they define."""

    def __init__(self, package: str, skip: Collection[str] = ()) -> None:
        self.package = package
        self.skip = frozenset(skip)
        self._lock = threading.Lock()
        self._loaded = False

    def load(self) -> None:
        """Import the package's modules (but the skipped and the private ones), the first time only."""
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            package = importlib.import_module(self.package)
            for module in pkgutil.iter_modules(package.__path__):
                if module.name not in self.skip and not module.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{module.name}")
            self._loaded = True

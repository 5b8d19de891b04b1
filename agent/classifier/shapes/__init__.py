"""The host-side shapes of waiting (``host/<shape>``), one module each, found by walking this package.

A module declares its shape with ``declare(Shape(...))``; the classifier's scores, reasons and
hints, the ledger's buckets and the docs read :data:`SHAPES`, and
``tests/classifier/test_classifier_shapes.py`` names the piece a new one lacks.
"""

from __future__ import annotations

import importlib
import pkgutil

from agent.classifier.shapes.shape import SHAPES, Shape, declare

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "shape":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["SHAPES", "Shape", "declare"]

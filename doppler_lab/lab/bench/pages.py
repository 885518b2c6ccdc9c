"""The benchmark pages' public face for the commands: read a bench record and draw its page
anew (:mod:`~doppler_lab.lab.bench._report` makes both). Presentation only: outside the code
version, like the module it names."""

from __future__ import annotations

from ._report import read_report, rewrite_page

__all__ = ["read_report", "rewrite_page"]

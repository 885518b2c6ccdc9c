"""doppler_lab: device placement of dataflow graphs (DOPPLER); see the README.

Importing the package loads nothing else but the small finder that keeps the old module paths
importable (:mod:`doppler_lab.house.moved`): its parts are imported where used.
"""

from .house import moved as _moved

__version__ = "0.2.0"  # the one place it is written: pyproject.toml reads it from here

_moved.install()

"""doppler_lab: device placement of dataflow graphs (DOPPLER); see the README.

Importing the package loads nothing else but the small finder that keeps the old module paths
importable (:mod:`doppler_lab.house.moved`), and points numba's cache at a folder of this version
of the compiled kernels (:mod:`doppler_lab.house.jitcache`): its parts are imported where used.
"""

from .house import jitcache as _jitcache
from .house import moved as _moved

__version__ = "0.2.0"  # the one place it is written: pyproject.toml reads it from here

_moved.install()
_jitcache.configure()

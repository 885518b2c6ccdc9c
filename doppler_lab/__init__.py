"""doppler_lab: device placement of dataflow graphs (DOPPLER); see the README.

Importing the package loads nothing else: its parts are imported where used.
"""

__version__ = "0.1.0"  # the one place it is written: pyproject.toml reads it from here

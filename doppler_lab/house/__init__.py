"""House services every part uses: errors, value checks and limits, settings parsing,
optional dependencies, atomic files and run folders, JSON, paths, progress, the code version,
trust of saved programs, the notebook filter and the runners (local or Ray).

Nothing here knows about graphs, devices or placements.
"""

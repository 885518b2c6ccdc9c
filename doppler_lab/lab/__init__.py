"""The experiment wing: code that runs experiments and writes reports, above the library.

- :mod:`~doppler_lab.lab.bench`: ``doppler-lab bench NAME``, each writing
  ``reports/bench/NAME.{json,md}``;
- :mod:`~doppler_lab.lab.reporting`: the papermill runner, the findings, the report site, the
  demo job;
- :mod:`~doppler_lab.lab.experiments`: the notebooks' training experiments;
- :mod:`~doppler_lab.lab.studies`: the notebooks' simulator studies.

Only ``commands/`` (and notebooks, tests) import it; nothing of the library below does. Its
modules are imported where used (``commands/`` loads them when a command runs), so
``doppler-lab --help`` loads none of them but ``bench``'s list of benchmarks.
"""

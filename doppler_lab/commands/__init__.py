"""Subcommands of ``doppler-lab`` (one module each; see :mod:`doppler_lab.cli`)."""

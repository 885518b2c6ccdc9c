"""The real work-conserving executor (see :mod:`doppler_lab.executor.torch_ops` for op semantics)."""

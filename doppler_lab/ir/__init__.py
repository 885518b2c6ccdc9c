"""The intermediate representation: :mod:`~doppler_lab.ir.graph` (the dataflow graph),
:mod:`~doppler_lab.ir.ops` and :mod:`~doppler_lab.ir.program` (what a node computes),
:mod:`~doppler_lab.ir.placement`, :mod:`~doppler_lab.ir.trace` (a run, simulated or measured)
and :mod:`~doppler_lab.ir.trace_path` (a trace's critical path). No torch.
"""

"""The search wing: which placement wins.

- :mod:`~doppler_lab.search.proposals`: the proposals a learned placement judges (which, how
  many simulator calls) and the one judge;
- :mod:`~doppler_lab.search.learned`: the learned placers (doppler, placeto, gdp) and the
  best-of-rollouts protocol;
- :mod:`~doppler_lab.search.budget`: the budget search around a policy's proposals;
- :mod:`~doppler_lab.search.adapter`: per-instance adaptation of the general policy.
"""

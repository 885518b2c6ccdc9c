"""Learned placement policies (torch / PyG): features, the MPNN encoder, the DOPPLER dual
policy and its ablations, Placeto and GDP."""

"""Costs: the price catalog, the session ledger and the self-hosted vs managed API comparison."""

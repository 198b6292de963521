"""Start and stop steps of serving profiles: lock, scale, probes, rollback, pool guard."""

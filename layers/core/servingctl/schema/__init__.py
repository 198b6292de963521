"""The documents engines produce and storage persists (the versioned benchmark results schema), so
that neither has to import the other; pydantic only."""

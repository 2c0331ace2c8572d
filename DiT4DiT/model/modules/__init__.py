"""Building blocks of the DiT4DiT framework: the Cosmos backbone and the action head."""

"""DiT4DiT model: the Cosmos backbone, the flow-matching action head and the framework that joins them."""

"""The GR00T-style flow-matching action head."""

"""Serving a trained policy over websockets with the original DiT4DiT's wire protocol."""

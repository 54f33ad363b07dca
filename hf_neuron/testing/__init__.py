"""Test helpers: tiny models, tokenizers and datasets built locally (no network)."""

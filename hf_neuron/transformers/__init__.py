"""transformers adapter package."""

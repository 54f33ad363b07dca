"""diffusers adapter package."""

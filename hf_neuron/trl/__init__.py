"""trl adapter package."""

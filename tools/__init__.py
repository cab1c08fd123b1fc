"""Development tools (the documentation generators); the packages never import them."""

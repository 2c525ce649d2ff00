"""worldtune: post-train Cosmos video world models on robot data, generate, and evaluate."""

__version__ = "0.1.0"

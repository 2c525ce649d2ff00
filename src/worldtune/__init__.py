"""worldtune: post-train Cosmos video world models on robot data, generate, and evaluate.

Importing worldtune changes nothing in the process (no environment variables): models load with
`local_files_only=True`, so nothing is downloaded without the process's own `HF_HUB_OFFLINE` being
set; the `worldtune` command quiets the libraries' logs itself (`worldtune.console`).
"""

__version__ = "0.1.0"

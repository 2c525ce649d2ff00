"""worldtune: post-train Cosmos video world models on robot data, generate, and evaluate."""

import os as _os

# diffusers/transformers warn about what is expected here (random weights, tiny vocabularies, an
# offline hub); keep their output to errors unless the user asked for more.
_os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
_os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
_os.environ.setdefault("HF_HUB_OFFLINE", "1")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"

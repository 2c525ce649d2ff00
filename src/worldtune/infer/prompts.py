"""Text embeddings, computed once per unique prompt, then the text encoder leaves the GPU.

A generation run repeats prompts (N seeds x M models per input, one negative prompt for all).
The Cosmos 2.5 text encoder is a 7B Qwen2.5-VL (15 GiB in bf16): encoding every prompt up front
and moving the encoder to the CPU frees that memory for denoising, and no prompt is encoded twice.
Embeddings are kept on the CPU (a 2.5 embedding is 512 x 100352 bf16 = 103 MB per prompt; the
run encodes only the prompts of the inputs it still has to generate). A family whose pipeline
takes the prompt text (Cosmos 3: token ids go into the transformer's own sequence) has nothing to
encode up front: its embeddings are None.
"""

from __future__ import annotations

import torch


class PromptEmbeddings:
    """prompt text -> its embedding [1, L, D] on the CPU, filled by `encode_all` (None for every prompt
    when the family's pipeline takes the text itself)."""

    def __init__(self, pipe, family, max_sequence_length: int) -> None:
        self.pipe = pipe
        self.family = family
        self.max_sequence_length = max_sequence_length
        self._cache: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self._cache)

    @torch.no_grad()
    def encode_all(self, prompts: list[str], device: torch.device | str) -> None:
        """Encode every prompt not cached yet (the text encoder runs on `device`), then park the encoder on the CPU."""
        if not self.family.prompt_embeddings:
            return
        todo = [p for p in dict.fromkeys(prompts) if p not in self._cache]
        encoder = self.family.text_encoder(self.pipe)
        if todo:
            if encoder is not None:
                encoder.to(device)
            for p in todo:
                self._cache[p] = self.family.encode_prompts(self.pipe, [p], "raw", device, self.max_sequence_length).to("cpu")
        if encoder is not None:
            encoder.to("cpu")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def get(self, prompt: str | None, device: torch.device | str) -> torch.Tensor | None:
        return self._cache[prompt].to(device) if self.family.prompt_embeddings else None

"""Cosmos prompt embeddings: each instruction through the chat template and the text encoder, once.

The embedding of an instruction is the concatenation of every text-encoder layer's hidden states
(embedding output excluded), each normalised over its features, for the chat-templated prompt padded
and truncated to `max_sequence_length` tokens; no attention mask is passed (as the Cosmos pipeline does).
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."


def tokenize_prompts(tokenizer, prompts: list[str], max_length: int) -> torch.Tensor:
    """(B, max_length) token ids of the two-message chat the Cosmos pipeline builds for each prompt."""
    rows = []
    for prompt in prompts:
        conversation = [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {"role": "user", "content": [{"type": "text", "text": prompt}]},
        ]
        ids = tokenizer.apply_chat_template(
            conversation,
            tokenize=True,
            add_generation_prompt=False,
            add_vision_id=False,
            max_length=max_length,
            truncation=True,
            padding="max_length",
        )
        if not isinstance(ids, list):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        rows.append(torch.tensor(ids, dtype=torch.long))
    return torch.stack(rows)


def encode_prompts(text_encoder, tokenizer, prompts: list[str], max_length: int) -> torch.Tensor:
    """(B, max_length, layers * hidden) embeddings in the text encoder's dtype, on its device."""
    input_ids = tokenize_prompts(tokenizer, prompts, max_length).to(text_encoder.device)
    hidden_states = text_encoder(input_ids, output_hidden_states=True).hidden_states
    normalised = []
    for layer in hidden_states[1:]:
        layer = layer.float()
        normalised.append((layer - layer.mean(dim=-1, keepdim=True)) / (layer.std(dim=-1, keepdim=True) + 1e-8))
    return torch.cat(normalised, dim=-1).to(text_encoder.dtype)


class PromptEmbeddingCache:
    """Instruction -> embedding (max_length, D); the text encoder runs only for instructions not yet cached.

    Entries move, once, to the device that asks for them and stay there: copying a batch of them from host
    memory every step costs more than re-running the text encoder on a fast accelerator (the real snapshot's
    embedding is 512 x 100352 bf16 = 98 MiB per instruction; on an H200 a host-resident cache made the 2B
    training step 1.4x slower than no cache at all, see bench/bench_model.py).
    """

    def __init__(self, encode: Callable[[list[str]], torch.Tensor], batch_size: int = 8):
        self._encode = encode
        self._batch_size = batch_size
        self._table: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, prompt: str) -> bool:
        return prompt in self._table

    @torch.no_grad()
    def fill(self, prompts: Iterable[str]) -> None:
        """Encode every instruction not yet cached, in batches (entries stay on the text encoder's device)."""
        missing = list(dict.fromkeys(p for p in prompts if p not in self._table))
        for start in range(0, len(missing), self._batch_size):
            chunk = missing[start : start + self._batch_size]
            for prompt, embedding in zip(chunk, self._encode(chunk)):
                self._table[prompt] = embedding.clone()

    def lookup(self, prompts: list[str], device: torch.device) -> torch.Tensor:
        """(B, max_length, D) embeddings for `prompts` on `device`; unseen instructions are encoded first."""
        self.fill(prompts)
        for prompt in dict.fromkeys(prompts):
            if self._table[prompt].device != device:
                self._table[prompt] = self._table[prompt].to(device)
        return torch.stack([self._table[p] for p in prompts])

    def nbytes(self) -> int:
        return sum(e.numel() * e.element_size() for e in self._table.values())

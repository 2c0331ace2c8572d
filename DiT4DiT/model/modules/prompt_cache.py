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

    Entries live in host memory (pinned when they were computed on an accelerator) and each batch is copied to
    the device without blocking. Device-resident entries would not scale: the real snapshot's embedding is
    512 x 100352 bf16 = 98 MiB per instruction, and a RoboTwin mixture has thousands of instructions.
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
        """Encode every instruction not yet cached, in batches, and keep the results in host memory."""
        missing = list(dict.fromkeys(p for p in prompts if p not in self._table))
        for start in range(0, len(missing), self._batch_size):
            chunk = missing[start : start + self._batch_size]
            embeddings = self._encode(chunk)
            on_accelerator = embeddings.device.type != "cpu"
            for prompt, embedding in zip(chunk, embeddings.cpu()):
                embedding = embedding.clone()
                self._table[prompt] = embedding.pin_memory() if on_accelerator else embedding

    def lookup(self, prompts: list[str], device: torch.device) -> torch.Tensor:
        """(B, max_length, D) embeddings for `prompts` on `device`; unseen instructions are encoded first."""
        self.fill(prompts)
        return torch.stack([self._table[p] for p in prompts]).to(device, non_blocking=True)

    def nbytes(self) -> int:
        return sum(e.numel() * e.element_size() for e in self._table.values())

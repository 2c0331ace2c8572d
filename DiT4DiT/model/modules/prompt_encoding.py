"""Cosmos prompt embeddings: an instruction through the chat template and the text encoder.

The embedding of an instruction is the concatenation of every text-encoder layer's hidden states
(embedding output excluded), each normalised over its features, for the chat-templated prompt padded
and truncated to `max_sequence_length` tokens; no attention mask is passed (as the Cosmos pipeline does).
"""

from __future__ import annotations

import torch

from DiT4DiT.model.modules.host_to_device import to_device

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
    input_ids = to_device(tokenize_prompts(tokenizer, prompts, max_length), text_encoder.device)
    hidden_states = text_encoder(input_ids, output_hidden_states=True).hidden_states
    normalised = []
    for layer in hidden_states[1:]:
        layer = layer.float()
        normalised.append((layer - layer.mean(dim=-1, keepdim=True)) / (layer.std(dim=-1, keepdim=True) + 1e-8))
    return torch.cat(normalised, dim=-1).to(text_encoder.dtype)

"""Cosmos prompt embeddings: an instruction through the chat template and the text encoder.

The embedding of an instruction is the concatenation of every text-encoder layer's hidden states
(embedding output excluded), each normalised over its features, for the chat-templated prompt padded
and truncated to `max_sequence_length` tokens; no attention mask is passed (as the Cosmos pipeline does).
"""

from __future__ import annotations

import torch

from DiT4DiT.model.modules.activation_checkpointing import checkpointed
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
    return embed_token_ids(text_encoder, input_ids)


def _normalised(layer: torch.Tensor) -> torch.Tensor:
    layer = layer.float()
    return (layer - layer.mean(dim=-1, keepdim=True)) / (layer.std(dim=-1, keepdim=True) + 1e-8)


def embed_token_ids(text_encoder, input_ids: torch.Tensor) -> torch.Tensor:
    """The embedding of (B, S) token ids: every layer's hidden states, normalised, side by side.

    The language model alone runs (its `lm_head` would add vocabulary-wide logits that nothing reads), without a
    KV cache. When the text encoder trains with its layers checkpointed (transformers' gradient_checkpointing_enable,
    trainer.text_encoder_gradient_checkpointing), each layer's float32 normalisation is recomputed in the backward
    too, so what the step keeps per layer is that layer's bf16 output, which is the next layer's checkpointed input.
    """
    hidden_states = text_encoder.model(input_ids=input_ids, output_hidden_states=True, use_cache=False).hidden_states
    recompute = text_encoder.is_gradient_checkpointing and text_encoder.training and torch.is_grad_enabled()
    normalised = [checkpointed(_normalised, layer) if recompute else _normalised(layer) for layer in hidden_states[1:]]
    return torch.cat(normalised, dim=-1).to(text_encoder.dtype)


def checkpoint_text_encoder_layers(text_encoder) -> None:
    """trainer.text_encoder_gradient_checkpointing: the text encoder's layers recompute their forward in the
    backward (transformers' own switch, non-reentrant as ours), and embed_token_ids recomputes the normalisation.
    transformers checkpoints only a module in training mode, and from_pretrained leaves it in eval mode (the
    full-size libero rehearsal kept every layer's graph): train mode, which changes nothing else (its dropouts are 0)."""
    text_encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    text_encoder.train()

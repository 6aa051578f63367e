"""A tiny Hugging Face-format Llama base for tests: config.json, random model.safetensors
(written with numpy), a tokenizer.json linked from the fixtures and a tokenizer_config.json."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

DIM = 16
HIDDEN = 32
LAYERS = 1
HEADS = 2


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors layout: u64 header length, JSON header, then the raw tensors."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def build_tiny_llama(directory: Path, tokenizer_json: Path, name: str, vocab_size: int,
                     eos_token: str, eos_id: int, chat_template: str | None, seed: int = 0) -> Path:
    """A LlamaForCausalLM with tied embeddings; `name` becomes its _name_or_path (its id)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "_name_or_path": name,
              "hidden_size": DIM, "intermediate_size": HIDDEN, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
              "vocab_size": vocab_size, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "tie_word_embeddings": True, "hidden_act": "silu",
              "bos_token_id": eos_id, "eos_token_id": eos_id}
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    rng = np.random.default_rng(seed)

    def w(*shape):
        return rng.normal(0.0, 0.05, size=shape).astype(np.float32)

    tensors = {"model.embed_tokens.weight": w(vocab_size, DIM), "model.norm.weight": np.ones(DIM)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors.update({p + "input_layernorm.weight": np.ones(DIM),
                        p + "self_attn.q_proj.weight": w(DIM, DIM),
                        p + "self_attn.k_proj.weight": w(DIM, DIM),
                        p + "self_attn.v_proj.weight": w(DIM, DIM),
                        p + "self_attn.o_proj.weight": w(DIM, DIM),
                        p + "post_attention_layernorm.weight": np.ones(DIM),
                        p + "mlp.gate_proj.weight": w(HIDDEN, DIM),
                        p + "mlp.up_proj.weight": w(HIDDEN, DIM),
                        p + "mlp.down_proj.weight": w(DIM, HIDDEN)})
    write_safetensors(directory / "model.safetensors", tensors)
    os.symlink(tokenizer_json, directory / "tokenizer.json")
    tok_config = {"bos_token": eos_token, "eos_token": eos_token, "unk_token": eos_token,
                  "add_bos_token": False, "model_max_length": 256}
    if chat_template is not None:
        tok_config["chat_template"] = chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=1))
    return directory

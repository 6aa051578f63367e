#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz corpora (tests/fuzz/corpus/<target>/seed-*).

libFuzzer grows each corpus from these (tests/fuzz/run.sh merges what it finds back into the
folder); CI replays the whole folder (fuzz_<target>_replay). The protocol seeds come from
`fuzz_protocol_corpus --seeds DIR` (valid requests and replies of every op, both encodings), so
this script writes the other three: tokenizer.json files in the shapes the loader accepts,
GRPO run configs and reward specs, and small safetensors files.
Usage: tests/fuzz/make_seeds.py [CORPUS_DIR]   (default: tests/fuzz/corpus next to it)
"""
import json
import os
import struct
import sys


def byte_char(b):
    printable = lambda x: ord('!') <= x <= ord('~') or 0xA1 <= x <= 0xAC or 0xAE <= x <= 0xFF
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for x in range(b) if not printable(x)))


def tokenizer(**overrides):
    vocab = {byte_char(b): b for b in range(256)}
    for i, w in enumerate(["he", "hel", "hell", "hello", "\u0120world", "<|endoftext|>"]):
        vocab[w] = 256 + i
    t = {
        "version": "1.0",
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab,
                  "merges": ["h e", "he l", ["hel", "l"], "hell o"],
                  "ignore_merges": False, "byte_fallback": False, "unk_token": None},
    }
    t.update(overrides)
    return t


def tokenizers():
    eot = {"id": 261, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
           "rstrip": False, "normalized": False, "special": True}
    yield "plain", tokenizer()
    yield "added", tokenizer(added_tokens=[eot])
    yield "split", tokenizer(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]})
    yield "template", tokenizer(added_tokens=[eot], post_processor={
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [261],
                                             "tokens": ["<|endoftext|>"]}}})
    yield "nfc", tokenizer(normalizer={"type": "NFC"})


def keyword_policy(name, word):
    return {"name": name, "rank": 4, "alpha": 8, "learning_rate": 1e-2,
            "dataset": {"name": "inline", "prompts": ["Once upon a time", "One day"]},
            "reward": {"terms": [{"name": word, "plugin": "keywords", "weight": 1,
                                  "config": {"present": [word]}}]}}


def run_configs():
    yield "keywords", {"seed": 3, "steps": 3, "group_size": 4, "prompts_per_step": 2,
                       "max_tokens": 12, "eval_every": 0, "save_every": 1, "eval_prompts": 0,
                       "policies": [keyword_policy("cat", "cat"), keyword_policy("dog", "dog")]}
    yield "arith", {"steps": 20, "group_size": 8, "policies": [
        {"name": "arith", "dataset": {"name": "arith"},
         "reward": {"terms": [{"name": "answer", "plugin": "numeric_match", "weight": 1.0,
                               "config": {}}]}}]}
    yield "steps_only", {"steps": 3}
    yield "reward_spec", {"terms": [
        {"name": "format", "plugin": "regex_format", "weight": 0.2,
         "config": {"pattern": "^[0-9]+$"}},
        {"name": "answer", "plugin": "numeric_match", "weight": 1, "config": {"tolerance": 0}}]}


def safetensors(entries, data, metadata=None):
    header = {name: {"dtype": dt, "shape": shape, "data_offsets": offs}
              for name, (dt, shape, offs) in entries.items()}
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def safetensors_files():
    yield "two_f32", safetensors({"a": ("F32", [2, 2], [0, 16]), "b": ("F32", [4], [16, 32])},
                                 bytes(range(32)), {"format": "pt"})
    yield "bf16_i32", safetensors({"w": ("BF16", [3], [0, 6]), "i": ("I32", [1], [6, 10])},
                                  bytes(10))
    yield "empty", safetensors({"z": ("F16", [0, 4], [0, 0])}, b"")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    groups = {
        "tokenizer_json": ((n, json.dumps(t, ensure_ascii=False).encode()) for n, t in tokenizers()),
        "run_config": ((n, json.dumps(c).encode()) for n, c in run_configs()),
        "safetensors": safetensors_files(),
    }
    for target, items in groups.items():
        os.makedirs(os.path.join(root, target), exist_ok=True)
        for name, data in items:
            with open(os.path.join(root, target, "seed-" + name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()

"""Tokenizers in the SDK and several bases in one daemon, against a real spindled serving
stories260K (llama2.c tokenizer) and a tiny Hugging Face-format Llama built here with the GPT-2
tokenizer and a chat template (id "test/gpt2-tiny", from its config's _name_or_path):
get_tokenizer() encode/decode equal the GPT-2 goldens and the `spindle tokenize` CLI, the chat
template renders as with jinja2 directly, both bases sample and train at once, and an unknown
base is a NotFoundError listing the served ids."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import spindle as tinker
from conftest import Daemon, shared_dir
from hf_base import build_tiny_llama

GPT2_ID = "test/gpt2-tiny"
GPT2_VOCAB = 50257
EOT = "<|endoftext|>"
EOT_ID = 50256
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' + message['role']) }}{% endif %}\n"
    "<|{{ message['role'] }}|>\n"
    "{{ message['content'] | trim }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
CONVERSATION = [{"role": "system", "content": "You count ducks."},
                {"role": "user", "content": "  How many ducks lay 16 eggs? "},
                {"role": "assistant", "content": "Janet’s ducks: 3."}]


def gpt2_dir() -> Path:
    return shared_dir() / "models" / "gpt2-tokenizer"


@pytest.fixture(scope="module")
def two_bases(tmp_path_factory):
    binary = os.environ.get("SPINDLED_BIN", "")
    if not binary or not Path(binary).is_file():
        pytest.skip(f"spindled binary not found (SPINDLED_BIN={binary!r})")
    stories = shared_dir() / "models" / "stories260K" / "stories260K.bin"
    tokenizer = gpt2_dir() / "tokenizer.json"
    for f in (stories, tokenizer):
        if not f.is_file():
            pytest.skip(f"fixture missing: {f}")
    tiny = build_tiny_llama(tmp_path_factory.mktemp("hf") / "gpt2-tiny", tokenizer, GPT2_ID,
                            GPT2_VOCAB, EOT, EOT_ID, CHAT_TEMPLATE)
    d = Daemon(Path(binary), stories, ["--model", str(tiny)])
    yield d
    code = d.stop()
    assert code == 0, "".join(d.log[-40:])


@pytest.fixture(scope="module")
def service(two_bases):
    client = tinker.ServiceClient(base_url=two_bases.endpoint, api_key=two_bases.token)
    yield client
    client.close()


def goldens() -> list[dict]:
    path = gpt2_dir() / "golden_gsm8k_test_first200.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def cli() -> Path | None:
    path = Path(os.environ.get("SPINDLED_BIN", "")).parent / "spindle"
    return path if path.is_file() else None


def test_both_bases_are_served_with_their_ids(service):
    caps = service.get_server_capabilities()
    assert [m.model_name for m in caps.supported_models] == ["stories260K", GPT2_ID]
    assert [b.vocab_size for b in caps.bases] == [512, GPT2_VOCAB]
    status = service.status()
    assert [b.id for b in status.bases] == ["stories260K", GPT2_ID]


def test_gpt2_tokenizer_matches_the_goldens(service):
    tok = service.create_sampling_client(base_model=GPT2_ID).get_tokenizer()
    assert tok.name_or_path == GPT2_ID and tok.kind == "bpe" and len(tok) == GPT2_VOCAB
    assert (tok.eos_token, tok.eos_token_id) == (EOT, EOT_ID)
    rows = goldens()
    assert len(rows) == 200
    encoded = tok([r["text"] for r in rows])["input_ids"]  # pipelined
    mismatched = [i for i, (r, ids) in enumerate(zip(rows, encoded)) if ids != r["ids"]]
    assert not mismatched, f"rows {mismatched[:5]} differ from the GPT-2 goldens"
    assert [tok.encode(r["text"]) for r in rows[:3]] == [r["ids"] for r in rows[:3]]  # cached
    assert all(tok.decode(r["ids"]) == r["text"] for r in rows)
    assert tok.batch_decode([r["ids"] for r in rows[:4]]) == [r["text"] for r in rows[:4]]
    # Special tokens written in the text are the special token, as Hugging Face parses them.
    assert tok.encode(f"hi{EOT}", add_special_tokens=False)[-1] == EOT_ID
    assert tok.decode([EOT_ID], skip_special_tokens=True) == ""
    assert tok.convert_tokens_to_ids(EOT) == EOT_ID and EOT_ID in tok.all_special_ids


def test_sdk_tokenizer_equals_the_cli(service, tmp_path):
    binary = cli()
    if binary is None:
        pytest.skip("the spindle CLI is not beside SPINDLED_BIN")
    tok = service.get_tokenizer(GPT2_ID)
    tokenizer_json = gpt2_dir() / "tokenizer.json"
    for i, row in enumerate(goldens()[::40]):
        text_file = tmp_path / f"row{i}.txt"
        text_file.write_text(row["text"], encoding="utf-8")
        out = subprocess.run([str(binary), "tokenize", "--tokenizer", str(tokenizer_json),
                              "--file", str(text_file)], check=True, capture_output=True)
        assert json.loads(out.stdout) == tok.encode(row["text"]) == row["ids"]
        text = subprocess.run([str(binary), "tokenize", "--tokenizer", str(tokenizer_json),
                               "--decode", json.dumps(row["ids"])], check=True,
                              capture_output=True).stdout.decode("utf-8")
        assert text == tok.decode(row["ids"]) == row["text"]


def test_chat_template_renders_as_jinja2_does(service):
    jinja2 = pytest.importorskip("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    tok = service.get_tokenizer(GPT2_ID)
    assert tok.chat_template == CHAT_TEMPLATE
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    for generation in (False, True):
        expected = env.from_string(CHAT_TEMPLATE).render(
            messages=CONVERSATION, add_generation_prompt=generation, bos_token=EOT, eos_token=EOT)
        text = tok.apply_chat_template(CONVERSATION, tokenize=False,
                                       add_generation_prompt=generation)
        assert text == expected
        assert tok.apply_chat_template(CONVERSATION, add_generation_prompt=generation) == \
            tok.encode(expected, add_special_tokens=False)
    assert text.startswith(EOT + "<|system|>\nYou count ducks." + EOT + "\n")
    assert text.endswith("<|assistant|>\n")
    as_dict = tok.apply_chat_template(CONVERSATION, return_dict=True)
    assert as_dict["input_ids"] == tok.apply_chat_template(CONVERSATION)
    batch = tok.apply_chat_template([CONVERSATION, CONVERSATION[:2]], tokenize=False)
    assert batch[0] == tok.apply_chat_template(CONVERSATION, tokenize=False) and len(batch) == 2
    with pytest.raises(jinja2.exceptions.TemplateError, match="unknown role tool"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}])


def test_base_without_a_template_says_so(service):
    tok = service.get_tokenizer("stories260K")
    assert tok.kind == "llama2c" and tok.chat_template is None
    assert (tok.bos_token_id, tok.eos_token_id) == (1, 2)
    ids = tok.encode("Once upon a time")
    assert ids[0] == tok.bos_token_id and tok.decode(ids, skip_special_tokens=True) == "Once upon a time"
    with pytest.raises(tinker.BadRequestError, match="stories260K.*no chat template"):
        tok.apply_chat_template(CONVERSATION)


def test_llama2c_literal_special_tokens_are_parsed(service):
    """As Hugging Face (and `spindle tokenize`): "<s>" in the text is BOS, which the cookbook's
    renderers rely on (RoleColonRenderer._bos_tokens encodes tokenizer.bos_token)."""
    tok = service.get_tokenizer("stories260K")
    assert tok.encode(tok.bos_token, add_special_tokens=False) == [tok.bos_token_id]


def test_both_bases_sample_and_train_at_once(service):
    stories = service.create_sampling_client(base_model="stories260K")
    gpt2 = service.create_sampling_client(base_model=GPT2_ID)
    params = tinker.SamplingParams(max_tokens=8, seed=3)
    prompt_s = tinker.ModelInput.from_ints(stories.get_tokenizer().encode("Once upon a time"))
    prompt_g = tinker.ModelInput.from_ints(gpt2.get_tokenizer().encode("Janet has ducks"))
    futures = [stories.sample(prompt_s, 2, params), gpt2.sample(prompt_g, 2, params)] * 2
    results = [f.result(timeout=120) for f in futures]
    for r, vocab in zip(results, [512, GPT2_VOCAB] * 2):
        assert all(len(s.tokens) == 8 and max(s.tokens) < vocab for s in r.sequences)
    assert [s.tokens for s in results[1].sequences] == [s.tokens for s in results[3].sequences]

    training = service.create_lora_training_client(GPT2_ID, rank=4, seed=1)
    assert training.get_base_model() == GPT2_ID and training.get_info().model_data.arch == "llama"
    ids = gpt2.get_tokenizer().encode("Janet has three ducks")
    datum = tinker.Datum(model_input=tinker.ModelInput.from_ints(ids[:-1]),
                         loss_fn_inputs={"target_tokens": ids[1:]})
    losses = []
    for _ in range(5):
        fb = training.forward_backward([datum], "cross_entropy")
        training.optim_step(tinker.AdamParams(learning_rate=5e-2))
        losses.append(fb.result().metrics["loss:sum"])
    assert losses[-1] < losses[0], losses
    sampler = training.save_weights_and_get_sampling_client()
    assert sampler.get_base_model() == GPT2_ID
    again = sampler.sample(prompt_g, 1, params).result()
    assert max(again.sequences[0].tokens) < GPT2_VOCAB
    assert np.isfinite(sampler.compute_logprobs(prompt_g).result()[1:]).all()
    training.close()


def test_unknown_base_lists_the_served_ids(service):
    for call in (lambda: service.create_sampling_client(base_model="Qwen/Qwen3-0.6B").sample(
                     tinker.ModelInput.from_ints([1]), 1, tinker.SamplingParams(max_tokens=1)).result(),
                 lambda: service.create_lora_training_client("Qwen/Qwen3-0.6B", rank=4),
                 lambda: service.get_tokenizer("Qwen/Qwen3-0.6B")):
        with pytest.raises(tinker.NotFoundError) as err:
            call()
        assert isinstance(err.value, tinker.SpindleError) and err.value.code == "not_found"
        assert "Qwen/Qwen3-0.6B" in err.value.message
        assert "stories260K" in err.value.message and GPT2_ID in err.value.message

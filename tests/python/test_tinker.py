"""The Tinker surface of the SDK (`import spindle as tinker`): the names, module paths and types
Tinker exports, its exception classes, and every call the issue added, round-tripped — types
alone, the exact wire bodies against an in-process fake daemon, and the behaviour against a
real spindled on stories260K (resume semantics, ttl_seconds, prompt logprobs, get_info,
forward_backward_custom, the RestClient)."""

from __future__ import annotations

import asyncio
import importlib
import json
import pickle
from datetime import timedelta

import numpy as np
import pytest

import spindle as tinker
from helpers import BOS, sft_datum
from test_transport import FakeDaemon

try:
    import torch
except ImportError:  # the torch-only tests skip
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

# tinker/__init__.py's __all__, less Timeout/RequestOptions/APIResponse (httpx request options).
TINKER_TOP_LEVEL = [
    "TrainingClient", "ServiceClient", "SamplingClient", "APIFuture", "AdamParams", "Checkpoint",
    "CheckpointType", "Datum", "DmelChunk", "EncodedTextChunk", "ForwardBackwardOutput",
    "LoraConfig", "ModelID", "ModelInput", "ModelInputChunk", "OptimStepRequest",
    "OptimStepResponse", "ParsedCheckpointTinkerPath", "SampledSequence", "SampleResponse",
    "SamplingParams", "StopReason", "TensorData", "TensorDtype", "TrainingRun", "TinkerError",
    "APIError", "APIStatusError", "APITimeoutError", "APIConnectionError",
    "APIResponseValidationError", "RequestFailedError", "BadRequestError", "AuthenticationError",
    "PermissionDeniedError", "NotFoundError", "ConflictError", "UnprocessableEntityError",
    "RateLimitError", "InternalServerError", "SidecarError", "SidecarStartupError",
    "SidecarDiedError", "SidecarIPCError", "types", "__version__", "__title__"]
# Module paths the cookbook imports from (`git grep "from tinker"` in tinker-cookbook), and the
# tinker.types modules of the types above.
TINKER_MODULES = {
    "spindle.types.tensor_data": ["TensorData"], "spindle.types.datum": ["Datum"],
    "spindle.types.model_input": ["ModelInput"], "spindle.types.encoded_text_chunk": ["EncodedTextChunk"],
    "spindle.types.image_chunk": ["ImageChunk"], "spindle.types.model_input_chunk": ["ModelInputChunk"],
    "spindle.types.sampling_params": ["SamplingParams"], "spindle.types.sample_response": ["SampleResponse"],
    "spindle.types.sampled_sequence": ["SampledSequence"], "spindle.types.stop_reason": ["StopReason"],
    "spindle.types.loss_fn_type": ["LossFnType"], "spindle.types.tensor_dtype": ["TensorDtype"],
    "spindle.types.optim_step_request": ["AdamParams", "OptimStepRequest"],
    "spindle.types.optim_step_response": ["OptimStepResponse"],
    "spindle.types.forward_backward_output": ["ForwardBackwardOutput"],
    "spindle.types.checkpoint": ["Checkpoint", "CheckpointType", "ParsedCheckpointTinkerPath"],
    "spindle.types.training_run": ["TrainingRun"], "spindle.types.get_info_response": ["GetInfoResponse", "ModelData"],
    "spindle.types.get_server_capabilities_response": ["GetServerCapabilitiesResponse", "SupportedModel"],
    "spindle.types.save_weights_response": ["SaveWeightsResponse"],
    "spindle.types.save_weights_for_sampler_response": ["SaveWeightsForSamplerResponse"],
    "spindle.types.load_weights_response": ["LoadWeightsResponse"],
    "spindle.types.checkpoints_list_response": ["CheckpointsListResponse"],
    "spindle.types.training_runs_response": ["TrainingRunsResponse"],
    "spindle.types.weights_info_response": ["WeightsInfoResponse"], "spindle.types.cursor": ["Cursor"],
    "spindle.lib.public_interfaces": ["APIFuture", "SamplingClient", "ServiceClient", "TrainingClient"],
    "spindle.lib.public_interfaces.rest_client": ["RestClient"],
}


# ---- names and types (no daemon) -----------------------------------------------------------

def test_tinker_names_and_module_paths_exist():
    missing = [n for n in TINKER_TOP_LEVEL if not hasattr(tinker, n)]
    assert not missing, missing
    for module, names in TINKER_MODULES.items():
        mod = importlib.import_module(module)
        assert all(hasattr(mod, n) for n in names), (module, names)
    assert tinker.types.ImageChunk is tinker.ImageChunk and tinker.types.LossFnType


def test_model_input_is_made_of_chunks():
    a = tinker.ModelInput.from_ints([1, 2, 3])
    assert a.chunks == [tinker.EncodedTextChunk(tokens=[1, 2, 3])] and a.length == 3
    b = a.append(tinker.EncodedTextChunk(tokens=[4])).append_int(5)
    assert b.to_ints() == [1, 2, 3, 4, 5] and len(b.chunks) == 3 and a.length == 3  # a unchanged
    assert tinker.ModelInput.empty().length == 0 and tinker.ModelInput(chunks=b.chunks) == b
    assert a.append(tinker.ModelInput.from_ints([9])).to_ints() == [1, 2, 3, 9]  # Spindle's form
    image = tinker.ImageChunk(data=b"\x89PNG", format="png", expected_tokens=7)
    with_image = a.append(image)
    assert with_image.length == 10
    with pytest.raises(ValueError, match="EncodedTextChunk"):
        with_image.to_ints()


def test_tensor_data_round_trips():
    ints = tinker.TensorData.from_numpy(np.array([[1, 2], [3, 4]], dtype=np.int32))
    assert (ints.dtype, ints.shape, ints.data) == ("int64", [2, 2], [1, 2, 3, 4])
    assert ints.tolist() == [[1, 2], [3, 4]] and ints.to_numpy().dtype == np.int64
    floats = tinker.TensorData(data=[0.5, 1.5], dtype="float32")
    assert floats.shape is None and floats.to_numpy().dtype == np.float32 and len(floats) == 2
    with pytest.raises(ValueError):
        tinker.TensorData(data=[1], dtype="bfloat16")
    if torch is not None:
        t = tinker.TensorData.from_torch(torch.tensor([1, 2, 3]))
        assert t.dtype == "int64" and torch.equal(t.to_torch(), torch.tensor([1, 2, 3]))
        h = tinker.TensorData.from_torch(torch.tensor([0.5, 2.0], dtype=torch.bfloat16))
        assert h.dtype == "float32" and h.tolist() == [0.5, 2.0]
        dense = torch.zeros(4, 6)
        dense[1, 2], dense[3, 5] = 1.0, 2.0
        sparse = tinker.TensorData.from_torch_sparse(dense)
        assert sparse.sparse_crow_indices is not None and torch.equal(sparse.to_torch(), dense)


def test_datum_converts_like_tinker():
    d = tinker.Datum(model_input=tinker.ModelInput.from_ints([1, 2]),
                     loss_fn_inputs={"target_tokens": [2, 3], "weights": [0, 1],
                                     "advantages": np.array([0.5, -0.5])})
    assert {k: v.dtype for k, v in d.loss_fn_inputs.items()} == {
        "target_tokens": "int64", "weights": "float32", "advantages": "float32"}
    if torch is not None:
        d = tinker.Datum(model_input=tinker.ModelInput.from_ints([1]),
                         loss_fn_inputs={"logprobs": torch.tensor([-1.0])})
        assert d.loss_fn_inputs["logprobs"].tolist() == [-1.0]
    with pytest.raises(TypeError):
        tinker.Datum(model_input=tinker.ModelInput.from_ints([1]), loss_fn_inputs={"weights": "x"})


def test_defaults_match_tinker():
    p = tinker.SamplingParams()
    assert (p.max_tokens, p.top_k, p.top_p, p.temperature, p.seed) == (None, -1, 1.0, 1.0, None)
    assert tinker.AdamParams() == tinker.AdamParams(learning_rate=1e-4, beta1=0.9, beta2=0.95,
                                                    eps=1e-12, weight_decay=0.0, grad_clip_norm=0.0)
    assert tinker.LoraConfig(rank=8).train_unembed is True
    import inspect
    sig = inspect.signature(tinker.ServiceClient.create_lora_training_client)
    assert {k: sig.parameters[k].default for k in ("rank", "seed", "train_mlp", "train_attn",
                                                   "train_unembed", "user_metadata")} == {
        "rank": 32, "seed": None, "train_mlp": True, "train_attn": True, "train_unembed": True,
        "user_metadata": None}


def test_sample_response_views():
    r = tinker.SampleResponse(sequences=[tinker.SampledSequence(stop_reason="stop", tokens=[5],
                                                                logprobs=[-0.1])],
                              prompt_logprobs=[None, -1.0],
                              topk_prompt_logprobs=[None, [(3, -0.5), (4, -1.0)]])
    assert np.isnan(r.prompt_logprobs_np[0]) and r.prompt_logprobs_np[1] == -1.0
    topk = r.topk_prompt_logprobs_np
    assert topk.token_ids.tolist() == [[0, 0], [3, 4]] and topk.logprobs[0, 0] == -99999.0
    assert r.sequences[0].tokens_np.tolist() == [5]
    assert tinker.SampleResponse(sequences=[]).prompt_logprobs is None


def test_errors_are_tinker_classes_and_spindle_errors():
    for code, cls in [("not_found", tinker.NotFoundError), ("invalid_argument", tinker.BadRequestError),
                      ("unauthenticated", tinker.AuthenticationError),
                      ("forbidden", tinker.PermissionDeniedError), ("already_exists", tinker.ConflictError),
                      ("overloaded", tinker.RateLimitError), ("resource_exhausted", tinker.RateLimitError),
                      ("internal", tinker.InternalServerError), ("timeout", tinker.APITimeoutError),
                      ("closed", tinker.APIConnectionError), ("unavailable", tinker.APIConnectionError),
                      ("unsupported", tinker.UnprocessableEntityError),
                      ("bad_reply", tinker.APIResponseValidationError)]:
        e = tinker.SpindleError(code, "why", "op")
        assert isinstance(e, cls) and isinstance(e, tinker.SpindleError) and isinstance(e, tinker.TinkerError)
        assert e.code == code and e.message == "why" and str(e) == f"{code}: why (op op)"
        again = pickle.loads(pickle.dumps(e))
        assert type(again) is type(e) and again.code == code
    assert tinker.SpindleError("not_found", "x").status_code == 404
    assert isinstance(tinker.SpindleError("timeout", "x"), tinker.APIConnectionError)
    with pytest.raises(tinker.NotFoundError):
        raise tinker.SpindleError.from_wire({"code": "not_found", "message": "gone"})


# ---- the wire bodies (a fake daemon) ---------------------------------------------------------

def _session(session_id="s1", **extra) -> dict:
    return {"session_id": session_id, "policy_address": "spindle://local/p", "base_model": "b",
            "rank": 4, "alpha": 4.0, "step": 0, "lease_ms": 0, "user_metadata_json": "",
            "revision_id": "", **extra}


def test_wire_bodies_of_the_new_calls(fake):
    def handler(header, frames):
        op = header["op"]
        if op in ("create_training", "create_training_from_state", "load_state"):
            return True, _session(), []
        if op in ("save_state", "save_weights"):
            return True, {"revision_id": "r", "address": "spindle://local/p@r", "bytes": 3,
                          "expires_ms": 5000 if header["body"]["ttl_seconds"] else 0}, []
        if op == "optim_step":
            return True, {"step": 7, "grad_norm": 0.5, "clipped": True}, []
        if op == "sample":
            n = len(frames[0]) // 4
            lp = np.array([np.nan] + [-1.0] * (n - 1), "<f4")
            ids = np.array([[-1, -1]] + [[3, 4]] * (n - 1), "<i4")
            tlp = np.array([[np.nan, np.nan]] + [[-0.5, -2.0]] * (n - 1), "<f4")
            ref = lambda i, shape, dt: {"frame": i, "dtype": dt, "shape": shape}  # noqa: E731
            return True, {"revision_id": "", "sequences": [],
                          "prompt_logprobs": ref(0, [n], "float32"),
                          "topk_prompt_ids": ref(1, [n, 2], "int32"),
                          "topk_prompt_logprobs": ref(2, [n, 2], "float32")}, [
                lp.tobytes(), ids.tobytes(), tlp.tobytes()]
        return True, {}, []

    server = fake(handler)
    with tinker.ServiceClient(base_url=server.endpoint, api_key="tok",
                              user_metadata={"team": "a", "run": "x"}) as service:
        training = service.create_lora_training_client("b", rank=4, seed=1,
                                                       user_metadata={"run": "y"})
        training.save_state("s", ttl_seconds=60).result()
        sampler_save = training.save_weights_for_sampler("w").result()
        training.load_state("spindle://local/p@r").result()
        training.load_state_with_optimizer("spindle://local/p@r").result()
        service.create_training_client_from_state("spindle://local/p@r", policy="fork-1")
        service.create_training_client_from_state_with_optimizer("spindle://local/p@r")
        step = training.optim_step(tinker.AdamParams()).result()
        sampler = service.create_sampling_client(base_model="b")
        got = sampler.sample(tinker.ModelInput.from_ints([1, 2, 3]), 1, tinker.SamplingParams(),
                             include_prompt_logprobs=True, topk_prompt_logprobs=2).result()
        with pytest.raises(tinker.BadRequestError, match="ImageChunk") as err:
            sampler.sample(tinker.ModelInput(chunks=[tinker.ImageChunk(data=b"x", format="png")]),
                           1, tinker.SamplingParams())
        assert err.value.code == "invalid_argument"
        with pytest.raises(tinker.BadRequestError, match="ImageChunk"):
            training.forward([tinker.Datum(model_input=tinker.ModelInput.from_ints([1]).append(
                tinker.ImageChunk(data=b"x", format="png", expected_tokens=1)),
                loss_fn_inputs={"target_tokens": [1, 2]})])
    bodies = {}
    for header, _ in server.received:
        bodies.setdefault(header["op"], []).append(header["body"])
    create = bodies["create_training"][0]
    assert create["cereal_class_version"] == 3 and create["train_unembed"] is True
    assert create["data_parallel"] == 1
    assert json.loads(create["user_metadata_json"]) == {"team": "a", "run": "y"}
    assert [b["ttl_seconds"] for b in bodies["save_state"] + bodies["save_weights"]] == [60, 0]
    assert all(b["cereal_class_version"] == 2 for b in bodies["save_state"] + bodies["save_weights"])
    assert sampler_save.expires_at is None and sampler_save.path == "spindle://local/p@r"
    assert [b["with_optimizer"] for b in bodies["load_state"]] == [False, True]
    weights_only, exact = bodies["create_training_from_state"]
    assert (weights_only["fork"], weights_only["with_optimizer"], weights_only["policy"]) == (True, False, "fork-1")
    assert json.loads(weights_only["user_metadata_json"]) == {"team": "a", "run": "x"}
    assert (exact["fork"], exact["with_optimizer"], exact["user_metadata_json"]) == (False, True, "")
    assert exact["cereal_class_version"] == 3 and exact["data_parallel"] == 1
    assert step.metrics == {"optim/step": 7.0, "optim/grad_norm": 0.5, "optim/clipped": 1.0}
    assert (step.step, step.grad_norm, step.clipped) == (7, 0.5, True)
    sample = bodies["sample"][0]
    assert sample["cereal_class_version"] == 2 and sample["sampling_params"]["max_tokens"] == 0
    assert (sample["include_prompt_logprobs"], sample["topk_prompt_logprobs"]) == (True, 2)
    assert got.prompt_logprobs == [None, -1.0, -1.0]
    assert got.topk_prompt_logprobs == [None, [(3, -0.5), (4, -2.0)], [(3, -0.5), (4, -2.0)]]
    assert len(bodies["sample"]) == 1  # the image prompt never left the client


def test_service_client_arguments(fake):
    server = fake(lambda h, f: (True, {}, []))
    with pytest.raises(tinker.BadRequestError, match="ZeroMQ"):
        tinker.ServiceClient(base_url="https://tinker.thinkingmachines.dev/services/tinker-prod")
    with pytest.raises(TypeError):
        tinker.ServiceClient(base_url=server.endpoint, api_key="t", no_such_option=1)
    with tinker.ServiceClient(base_url=server.endpoint, api_key="t", timeout=30,
                              project_id="p") as a:
        assert a.endpoint == server.endpoint and a.project_id == "p"
    with tinker.ServiceClient(server.endpoint, "t") as b:  # Spindle's positional form
        assert b.endpoint == server.endpoint
    with pytest.raises(ValueError):
        b.create_sampling_client()


@pytest.fixture
def fake():
    servers = []

    def start(handler):
        servers.append(FakeDaemon(handler))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


# ---- against a real spindled -----------------------------------------------------------------

@pytest.fixture
def connect(daemon):
    """ServiceClient(base_url=..., api_key=..., **kwargs) to the daemon, closed (with its
    training sessions) at the end of the test, pass or fail."""
    clients = []

    def make(**kwargs):
        clients.append(tinker.ServiceClient(base_url=daemon.endpoint, api_key=daemon.token, **kwargs))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


def _datum(tokens):
    return sft_datum([BOS], tokens)


def _logprobs(client, datum):
    return client.forward([datum]).result().loss_fn_outputs[0]["logprobs"].to_numpy()


def _train(client, datum, steps, lr=1e-2):
    for _ in range(steps):
        client.forward_backward([datum], "cross_entropy")
        client.optim_step(tinker.AdamParams(learning_rate=lr))
    return client.forward([datum]).result()


def test_resume_semantics_match_tinker(connect, base_model):
    service = connect(user_metadata={"suite": "tinker"})
    datum = _datum([300, 301, 302, 303, 304])
    original = service.create_lora_training_client(base_model, rank=4, seed=9, policy="tk-resume")
    _train(original, datum, 2)
    saved = original.save_state("two", ttl_seconds=900).result()
    assert saved.expires_ms > 0 and saved.expires_at is not None

    weights_only = service.create_training_client_from_state(saved.path)
    exact = service.create_training_client_from_state_with_optimizer(saved.path)
    assert weights_only.policy_address.startswith(original.policy_address + "-")  # forked
    assert exact.policy_address == original.policy_address
    assert weights_only.user_metadata == {"suite": "tinker"}
    assert weights_only.info.revision_id == exact.info.revision_id == saved.revision_id
    assert service.show(weights_only.policy_address).policy.forked_from
    for c in (weights_only, exact):
        np.testing.assert_allclose(_logprobs(c, datum), _logprobs(original, datum), atol=1e-6)
    # One more identical step: the exact resume follows the original; weights only (a fresh
    # AdamW) takes a different step.
    after = [_train(c, datum, 1) for c in (original, exact, weights_only)]
    lp = [a.loss_fn_outputs[0]["logprobs"].to_numpy() for a in after]
    np.testing.assert_allclose(lp[1], lp[0], atol=1e-6)
    assert not np.allclose(lp[2], lp[0], atol=1e-4)

    # load_state is weights only, load_state_with_optimizer exact, on an existing session.
    loaded = [service.create_lora_training_client(base_model, rank=4, seed=s) for s in (1, 2)]
    r0 = loaded[0].load_state(saved.path).result()
    r1 = loaded[1].load_state_with_optimizer(saved.path).result()
    assert r0.path == r1.path == saved.path and r0.model_id == loaded[0].model_id
    lp = [_train(c, datum, 1).loss_fn_outputs[0]["logprobs"].to_numpy() for c in loaded]
    np.testing.assert_allclose(lp[1], after[0].loss_fn_outputs[0]["logprobs"].to_numpy(), atol=1e-6)
    np.testing.assert_allclose(lp[0], after[2].loss_fn_outputs[0]["logprobs"].to_numpy(), atol=1e-6)


def test_info_tokenizer_and_prompt_logprobs(connect, base_model):
    service = connect()
    training = service.create_lora_training_client(base_model, rank=4, seed=3)
    info = training.get_info()
    assert (info.model_id, info.lora_rank, info.is_lora) == (training.policy_address, 4, True)
    assert (info.model_data.model_name, info.model_data.arch, info.model_name) == (base_model, "llama", base_model)
    assert asyncio.run(training.get_info_async()) == info and training.get_base_model() == base_model
    tokenizer = training.get_tokenizer()
    sampler = training.save_weights_and_get_sampling_client()
    assert sampler.get_base_model() == base_model and sampler.get_tokenizer() is tokenizer
    named = service.create_sampling_client(model_path=sampler.model_path)
    assert named.get_base_model() == base_model  # looked up in the catalog

    prompt = tinker.ModelInput.from_ints(tokenizer.encode("Once upon a time there was"))
    reply = sampler.sample(prompt, 2, tinker.SamplingParams(max_tokens=4, seed=1),
                           include_prompt_logprobs=True, topk_prompt_logprobs=5).result()
    scored = sampler.compute_logprobs(prompt).result()
    assert reply.prompt_logprobs[0] is None and len(reply.prompt_logprobs) == prompt.length
    np.testing.assert_allclose(reply.prompt_logprobs[1:], scored[1:], atol=1e-4)
    assert reply.topk_prompt_logprobs[0] is None and len(reply.topk_prompt_logprobs) == prompt.length
    tokens = prompt.to_ints()
    for i, row in enumerate(reply.topk_prompt_logprobs[1:], start=1):
        assert len(row) == 5 and [lp for _, lp in row] == sorted((lp for _, lp in row), reverse=True)
        assert scored[i] <= row[0][1] + 1e-4
        if tokens[i] in dict(row):
            assert dict(row)[tokens[i]] == pytest.approx(scored[i], abs=1e-4)
    plain = sampler.sample(prompt, 1, tinker.SamplingParams(max_tokens=4, seed=1)).result()
    assert plain.prompt_logprobs is None and plain.topk_prompt_logprobs is None
    assert plain.sequences[0].tokens == reply.sequences[0].tokens
    unbounded = sampler.sample(prompt, 1, tinker.SamplingParams(seed=2)).result()  # max_tokens None
    assert len(unbounded.sequences[0].tokens) > 4


@needs_torch
def test_forward_backward_custom(connect, base_model):
    service = connect()
    data = [_datum([300, 301, 302, 303]), _datum([40, 41, 42])]
    builtin = service.create_lora_training_client(base_model, rank=4, seed=5)
    custom = service.create_lora_training_client(base_model, rank=4, seed=5)

    def cross_entropy(batch, logprobs):
        loss = sum(-(lp * d.loss_fn_inputs["weights"].to_torch()).sum() for d, lp in zip(batch, logprobs))
        return loss, {"custom/loss": float(loss)}

    expected = builtin.forward_backward(data, "cross_entropy").result()
    out = custom.forward_backward_custom(data, cross_entropy).result()
    assert out.metrics["custom/loss"] == pytest.approx(expected.metrics["loss:sum"], rel=1e-4)
    for c in (builtin, custom):
        c.optim_step(tinker.AdamParams(learning_rate=1e-2)).result()
    for d in data:  # the same gradient, so the same step
        np.testing.assert_allclose(_logprobs(custom, d), _logprobs(builtin, d), atol=1e-5)

    # A pairwise loss (as the cookbook's DPO recipes write them): prefer data[0] to data[1].
    def prefer_first(batch, logprobs):
        margin = logprobs[0].sum() - logprobs[1].sum()
        return -torch.nn.functional.logsigmoid(0.1 * margin), {"margin": float(margin)}

    margins = []
    for _ in range(6):
        fb = asyncio.run(custom.forward_backward_custom_async(data, prefer_first))
        custom.optim_step(tinker.AdamParams(learning_rate=2e-2))
        margins.append(fb.result().metrics["margin"])
    assert margins[-1] > margins[0] + 1.0, margins
    with pytest.raises(ValueError, match="unexpected keys"):
        custom.forward_backward_custom([tinker.Datum(model_input=tinker.ModelInput.from_ints([1]),
                                                     loss_fn_inputs={"target_tokens": [2],
                                                                     "advantages": [1.0]})],
                                       cross_entropy)


def test_rest_client_over_the_catalog(connect, base_model):
    service = connect(user_metadata={"owner": "rest-test"})
    training = service.create_lora_training_client(base_model, rank=4, seed=2, policy="tk-rest")
    datum = _datum([50, 51, 52])
    _train(training, datum, 1)
    state = training.save_state("state-1", ttl_seconds=3600).result()
    _train(training, datum, 1)
    durable = training.save_weights_for_sampler("final").result()
    sampler = training.save_weights_and_get_sampling_client()

    rest = service.create_rest_client()
    run = rest.get_training_run(training.model_id).result()
    assert (run.training_run_id, run.base_model, run.model_owner, run.lora_rank) == (
        training.model_id, base_model, "local", 4)
    assert run.user_metadata == {"owner": "rest-test"}
    assert run.last_checkpoint.tinker_path == state.path
    assert run.last_sampler_checkpoint.tinker_path == sampler.model_path
    assert rest.get_training_run("tk-rest").result().training_run_id == training.model_id
    assert rest.get_training_run_by_tinker_path(state.path).result().training_run_id == training.model_id

    listed = rest.list_checkpoints(training.model_id).result().checkpoints
    assert [c.tinker_path for c in listed] == [sampler.model_path, durable.path, state.path]
    eph, dur, st = listed
    assert (st.checkpoint_type, st.name, st.step) == ("training", "state-1", 1)
    assert (dur.checkpoint_type, dur.expires_at, dur.name, dur.step) == ("sampler", None, "final", 2)
    assert timedelta(minutes=59) < st.expires_at - st.time < timedelta(minutes=61)
    assert timedelta(minutes=59) < eph.expires_at - eph.time < timedelta(minutes=61)
    assert all(c.size_bytes > 0 and not c.expired for c in listed)

    rest.set_checkpoint_ttl_from_tinker_path(sampler.model_path, None).result()  # promote
    assert rest.list_checkpoints(training.model_id).result().checkpoints[0].expires_at is None
    with pytest.raises(tinker.UnprocessableEntityError, match="set_checkpoint_ttl"):
        rest.set_checkpoint_ttl_from_tinker_path(state.path, 60)
    with pytest.raises(tinker.UnprocessableEntityError, match="delete_checkpoint"):
        rest.delete_checkpoint(training.model_id, state.revision_id)
    with pytest.raises(tinker.UnprocessableEntityError, match="publish_checkpoint_from_tinker_path"):
        rest.publish_checkpoint_from_tinker_path(state.path)

    mine = rest.list_user_checkpoints(limit=2).result()
    assert len(mine.checkpoints) == 2 and mine.cursor.total_count >= 3
    assert mine.checkpoints[0].time >= mine.checkpoints[1].time
    runs = rest.list_training_runs(limit=100).result()
    assert training.model_id in [r.training_run_id for r in runs.training_runs]
    assert runs.cursor.total_count == len(runs.training_runs)
    info = rest.get_weights_info_by_tinker_path(state.path).result()
    assert (info.base_model, info.lora_rank, info.train_unembed, info.train_mlp, info.train_attn) == (
        base_model, 4, True, True, True)
    asyncio.run(rest.list_checkpoints_async(training.model_id))


def test_errors_from_the_daemon(daemon, connect, base_model):
    with pytest.raises(tinker.AuthenticationError):
        tinker.ServiceClient(base_url=daemon.endpoint, api_key="0" * 64)
    service = connect()
    sampler = service.create_sampling_client(model_path="spindle://local/no-such-policy")
    with pytest.raises(tinker.NotFoundError) as err:
        sampler.sample(tinker.ModelInput.from_ints([BOS]), 1, tinker.SamplingParams(max_tokens=2)).result()
    assert isinstance(err.value, tinker.SpindleError) and err.value.code == "not_found"
    with pytest.raises(tinker.BadRequestError):
        service.create_lora_training_client(base_model, rank=0)
    service.create_lora_training_client(base_model, rank=4, policy="tk-taken")
    with pytest.raises(tinker.ConflictError):
        service.create_lora_training_client(base_model, rank=4, policy="tk-taken")

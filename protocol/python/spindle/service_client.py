"""ServiceClient: the connection to one spindled (Tinker's ServiceClient) plus catalog helpers."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Sequence, TypeVar

from . import _config, _convert, _sessions, _streams, _wire
from ._futures import APIFuture
from ._transport import CurveKeys, Transport
from .errors import INVALID_ARGUMENT, SpindleError, unsupported
from .sampling_client import SamplingClient
from .tokenizer import Tokenizer
from .training_client import TrainingClient
from .types import (BaseInfo, ExportPeftResponse, HandshakeInfo, LineageResponse, PolicyDetails,
                    PolicyListResponse, SamplingParams, ServerCapabilities, ServerStatus)
from .types import _rewards, _runs, _studio
from .types._records import from_wire

if TYPE_CHECKING:
    from .rest_client import RestClient

T = TypeVar("T")

PEFT_CONFIG = "adapter_config.json"
PEFT_MODEL = "adapter_model.safetensors"

# reward_test's completion length when no SamplingParams is given (reward_test needs a bound).
REWARD_TEST_MAX_TOKENS = 16

# Tinker's HTTP-client keyword arguments, accepted and ignored (ZeroMQ has no equivalent).
IGNORED_TINKER_KWARGS = frozenset({"timeout", "max_retries", "default_headers", "default_query",
                                   "http_client", "_strict_response_validation"})


class ServiceClient:
    """Connects (DEALER) to the daemon and shakes hands, so a wrong token fails here with
    SpindleError("unauthenticated") (an AuthenticationError) and an absent daemon with
    SpindleError("timeout") (an APITimeoutError) after `connect_timeout_s`.

    Tinker's arguments: base_url is the endpoint (ipc://PATH or tcp://HOST:PORT; HTTP URLs are
    refused), api_key the token, user_metadata (dict of str) is stored with every policy this
    client creates (merged under each call's own user_metadata), project_id is kept but unused.
    `endpoint`/`token` are the same as base_url/api_key. Both default to $SPINDLE_ENDPOINT /
    $SPINDLE_TOKEN, else the local daemon of the data dir (ipc://<data_dir>/spindled.sock and
    <data_dir>/token). For tcp:// endpoints pass server_public_key (z85; printed by spindled,
    in <data_dir>/curve/server.pub) and client_keys=(public, secret) whose public key is on the
    daemon's allow-list.

    One background thread owns the socket; every method is thread-safe and returns quickly
    (futures) or blocks only on its own reply. close() (or leaving a `with` block, or the
    interpreter exiting) ends this client's training sessions and the connection."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None,
                 server_public_key: str | None = None,
                 client_keys: tuple[str, str] | None = None, *,
                 user_metadata: Dict[str, str] | None = None, project_id: str | None = None,
                 endpoint: str | None = None, token: str | None = None,
                 connect_timeout_s: float = 30.0, max_overloaded_retries: int = 100,
                 client_name: str = "spindle-python", **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - IGNORED_TINKER_KWARGS)
        if unknown:
            raise TypeError(f"ServiceClient() got unexpected keyword arguments {unknown}")
        if base_url and endpoint and base_url != endpoint:
            raise TypeError("ServiceClient(): base_url and endpoint name the same thing; pass one")
        if api_key is not None and token is not None and api_key != token:
            raise TypeError("ServiceClient(): api_key and token name the same thing; pass one")
        self.endpoint = base_url or endpoint or _config.default_endpoint()
        if self.endpoint.startswith(("http://", "https://")):
            raise SpindleError(INVALID_ARGUMENT, f"base_url {self.endpoint!r}: spindled speaks "
                               "ZeroMQ; use tcp://HOST:PORT (with server_public_key) or ipc://PATH")
        self.user_metadata: Dict[str, str] = {str(k): str(v) for k, v in (user_metadata or {}).items()}
        self.project_id = project_id
        secret = api_key if api_key is not None else token
        curve = None
        if server_public_key:
            if not client_keys:
                import zmq
                public, private = zmq.curve_keypair()
                client_keys = (public.decode("ascii"), private.decode("ascii"))
            curve = CurveKeys(server_public_key, client_keys[0], client_keys[1])
        self._transport = Transport(self.endpoint,
                                    secret if secret is not None else _config.default_token(),
                                    curve, max_overloaded_retries)
        self._sessions = _sessions.SessionKeeper(self._transport)
        self._lock = threading.Lock()
        self._tokenizers: dict[str, Tokenizer] = {}   # by base id; guarded by _lock
        self._capabilities: ServerCapabilities | None = None
        self._pid = os.getpid()
        try:
            self.server: HandshakeInfo = self._request(
                "handshake", {"client_name": client_name}, None,
                lambda r: from_wire(HandshakeInfo, r.body)).result(connect_timeout_s)
        except BaseException:
            self._sessions.stop()
            self._transport.close()
            raise
        _sessions.track(self)

    # ---- plumbing ------------------------------------------------------------------------

    def _request(self, op: str, body: dict, frames: _wire.FrameBuilder | None,
                 convert: Callable[[_wire.Reply], T]) -> APIFuture[T]:
        raw = self._transport.submit(op, body, frames.frames if frames else None)
        return APIFuture(raw, convert)

    def _call(self, op: str, body: dict, convert: Callable[[_wire.Reply], T],
              frames: _wire.FrameBuilder | None = None) -> T:
        return self._request(op, body, frames, convert).result()

    @property
    def overloaded_retries(self) -> int:
        """How many `overloaded` replies this client has retried so far."""
        return self._transport.overloaded_retries

    @property
    def unavailable_retries(self) -> int:
        """How many `unavailable` replies (a cluster worker lost mid-request) this client has
        resent so far: sample, compute_logprobs and reward_test only (PROTOCOL.md)."""
        return self._transport.unavailable_retries

    def close(self) -> None:
        """Closes the training sessions this client opened (their saved revisions stay), then
        stops the I/O thread; requests still in flight fail with SpindleError("closed")."""
        _sessions.untrack(self)
        self._sessions.close_all()
        self._sessions.stop()
        self._transport.close()

    def __enter__(self) -> "ServiceClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- server --------------------------------------------------------------------------

    def get_server_capabilities(self) -> ServerCapabilities:
        """The served bases (`.bases`, Tinker's `.supported_models[i].model_name`), limits,
        losses and encodings."""
        caps = self._call("capabilities", {}, _convert.capabilities)
        self._capabilities = caps
        return caps

    async def get_server_capabilities_async(self) -> ServerCapabilities:
        caps = await self._request("capabilities", {}, None, _convert.capabilities)
        self._capabilities = caps
        return caps

    def _base_info(self, base_id: str) -> BaseInfo | None:
        caps = self._capabilities or self.get_server_capabilities()
        return next((b for b in caps.bases if b.id == base_id), None)

    def status(self) -> ServerStatus:
        return self._call("status", {}, _convert.status)

    def cluster_status(self) -> dict:
        """The `cluster_status` op as a dict: `role`, `cluster_endpoint`, `workers` (one dict per
        worker: id, name, base, device, alive, queue_depth, forwarded, placed_policies, ...),
        `placed_policies`, `replica_placements`, `data_parallel` (this tenant's data-parallel
        sessions: session_id, policy_address, workers by rank, generation). A standalone
        daemon has no workers."""
        return self._call("cluster_status", {}, lambda reply: dict(reply.body))

    def get_tokenizer(self, base_model: str) -> Tokenizer:
        """The tokenizer of base `base_model`, run by the daemon (one cached object per base)."""
        with self._lock:
            hit = self._tokenizers.get(base_model)
        if hit is not None:
            return hit
        tokenizer = Tokenizer(self, base_model)
        with self._lock:
            return self._tokenizers.setdefault(base_model, tokenizer)

    def create_rest_client(self) -> "RestClient":
        """Tinker's RestClient: checkpoints and training runs, over this daemon's catalog."""
        from .rest_client import RestClient
        return RestClient(self)

    # ---- training and sampling -----------------------------------------------------------

    def _metadata_json(self, user_metadata: Dict[str, str] | None) -> str:
        return _convert.user_metadata_json(self.user_metadata, user_metadata)

    def _training_client(self, reply: _wire.Reply) -> TrainingClient:
        client = TrainingClient(self, _convert.session_info(reply))
        self._sessions.add(client)
        return client

    def _create_training_future(self, base_model: str, rank: int, seed: int | None,
                                train_mlp: bool, train_attn: bool, train_unembed: bool,
                                user_metadata: Dict[str, str] | None, alpha: float | None,
                                policy: str | None, description: str,
                                data_parallel: int = 1) -> APIFuture[TrainingClient]:
        body = {"base_model": str(base_model), "policy": policy or "", "rank": int(rank),
                "alpha": float(rank if alpha is None else alpha), "train_attn": bool(train_attn),
                "train_mlp": bool(train_mlp), "train_unembed": bool(train_unembed),
                "seed": _convert.random_seed() if seed is None else int(seed),
                "description": str(description),
                "user_metadata_json": self._metadata_json(user_metadata),
                "data_parallel": int(data_parallel)}
        return self._request("create_training", _convert.versioned(body, _convert.CREATE_TRAINING_V),
                             None, self._training_client)

    def create_lora_training_client(self, base_model: str, rank: int = 32, seed: int | None = None,
                                    train_mlp: bool = True, train_attn: bool = True,
                                    train_unembed: bool = True,
                                    user_metadata: Dict[str, str] | None = None, *,
                                    alpha: float | None = None, policy: str | None = None,
                                    description: str = "",
                                    data_parallel: int = 1) -> TrainingClient:
        """Creates policy `policy` (a generated name when None) on `base_model` and a training
        session on it. train_*: which weights get LoRA adapters (Tinker's defaults: all);
        alpha None = rank (scale 1); seed None = random LoRA init. data_parallel N > 1 (a
        coordinator with N live workers for the base): the session trains on N workers, each
        with its share of every forward_backward, their gradients summed before each
        optim_step; the results equal one worker's with the whole batch."""
        return self._create_training_future(base_model, rank, seed, train_mlp, train_attn,
                                            train_unembed, user_metadata, alpha, policy,
                                            description, data_parallel).result()

    async def create_lora_training_client_async(self, base_model: str, rank: int = 32,
                                                seed: int | None = None, train_mlp: bool = True,
                                                train_attn: bool = True,
                                                train_unembed: bool = True,
                                                user_metadata: Dict[str, str] | None = None, *,
                                                alpha: float | None = None,
                                                policy: str | None = None,
                                                description: str = "",
                                                data_parallel: int = 1) -> TrainingClient:
        return await self._create_training_future(base_model, rank, seed, train_mlp, train_attn,
                                                  train_unembed, user_metadata, alpha, policy,
                                                  description, data_parallel)

    def _from_state_future(self, path: str, with_optimizer: bool, fork: bool,
                           base_model: str | None, user_metadata: Dict[str, str] | None,
                           weights_access_token: str | None,
                           policy: str | None, data_parallel: int = 1) -> APIFuture[TrainingClient]:
        if weights_access_token is not None:
            raise unsupported("create_training_client_from_state(weights_access_token=...)",
                              "revisions are loaded with this client's own token")
        # user_metadata is stored on a new policy only; an exact resume keeps the policy's own.
        metadata = self._metadata_json(user_metadata) if fork else ""
        body = {"address": str(path), "with_optimizer": bool(with_optimizer), "fork": bool(fork),
                "policy": policy or "", "user_metadata_json": metadata,
                "data_parallel": int(data_parallel)}

        def convert(reply: _wire.Reply) -> TrainingClient:
            client = self._training_client(reply)
            if base_model and client.info.base_model != base_model:
                client.close()
                raise SpindleError(INVALID_ARGUMENT, f"{path} is a revision of base "
                                   f"'{client.info.base_model}', not '{base_model}'",
                                   "create_training_from_state")
            return client

        return self._request("create_training_from_state",
                             _convert.versioned(body, _convert.CREATE_FROM_STATE_V), None, convert)

    def create_training_client_from_state(self, path: str, base_model: str | None = None,
                                          user_metadata: Dict[str, str] | None = None,
                                          weights_access_token: str | None = None, *,
                                          policy: str | None = None,
                                          data_parallel: int = 1) -> TrainingClient:
        """Tinker's semantics: a new policy forked at revision `path` (named `policy`, default
        "<policy>-<8 hex>") with its weights only and a fresh optimizer, and a session on it.
        data_parallel: as create_lora_training_client's."""
        return self._from_state_future(path, False, True, base_model, user_metadata,
                                       weights_access_token, policy, data_parallel).result()

    async def create_training_client_from_state_async(self, path: str,
                                                      base_model: str | None = None,
                                                      user_metadata: Dict[str, str] | None = None,
                                                      weights_access_token: str | None = None, *,
                                                      policy: str | None = None,
                                                      data_parallel: int = 1) -> TrainingClient:
        return await self._from_state_future(path, False, True, base_model, user_metadata,
                                             weights_access_token, policy, data_parallel)

    def create_training_client_from_state_with_optimizer(
            self, path: str, base_model: str | None = None,
            user_metadata: Dict[str, str] | None = None,
            weights_access_token: str | None = None, *, data_parallel: int = 1) -> TrainingClient:
        """Exact resume: a session on the revision's own policy with its weights and, when it
        was saved with save_state, its optimizer state (the session's step is the revision's).
        user_metadata is not stored (the policy keeps its own). data_parallel: as
        create_lora_training_client's."""
        return self._from_state_future(path, True, False, base_model, user_metadata,
                                       weights_access_token, None, data_parallel).result()

    async def create_training_client_from_state_with_optimizer_async(
            self, path: str, base_model: str | None = None,
            user_metadata: Dict[str, str] | None = None,
            weights_access_token: str | None = None, *, data_parallel: int = 1) -> TrainingClient:
        return await self._from_state_future(path, True, False, base_model, user_metadata,
                                             weights_access_token, None, data_parallel)

    def create_sampling_client(self, model_path: str | None = None,
                               base_model: str | None = None,
                               retry_config: Any = None) -> SamplingClient:
        """model_path: a policy or revision address; base_model: a base id (no adapter).
        Exactly one (ValueError otherwise, as Tinker)."""
        del retry_config
        if bool(model_path) == bool(base_model):
            raise ValueError("create_sampling_client: pass exactly one of model_path and base_model")
        if model_path:
            return SamplingClient(self, model_path)
        return SamplingClient(self, base_model, base_model=base_model)  # type: ignore[arg-type]

    async def create_sampling_client_async(self, model_path: str | None = None,
                                           base_model: str | None = None,
                                           retry_config: Any = None) -> SamplingClient:
        return self.create_sampling_client(model_path, base_model, retry_config)

    # ---- catalog -------------------------------------------------------------------------

    def list_policies(self, base_id: str = "", tag: str = "", name_prefix: str = "",
                      limit: int = 100, cursor: str = "") -> PolicyListResponse:
        """One page, keyset-paginated: pass the reply's next_cursor for the next ("" = end)."""
        body = {"base_id": base_id, "tag": tag, "name_prefix": name_prefix, "limit": int(limit),
                "cursor": cursor}
        return self._call("catalog_list", body, _convert.policy_list)

    def search(self, text: str, limit: int = 20) -> PolicyListResponse:
        return self._call("catalog_search", {"text": str(text), "limit": int(limit)},
                          _convert.policy_list)

    def show(self, address: str) -> PolicyDetails:
        return self._call("catalog_show", {"address": str(address)}, _convert.policy_details)

    def lineage(self, address: str, max_ancestors: int = 1000,
                max_descendants: int = 1000) -> LineageResponse:
        body = {"address": str(address), "max_ancestors": int(max_ancestors),
                "max_descendants": int(max_descendants)}
        return self._call("catalog_lineage", body, _convert.lineage)

    def fork(self, address: str, name: str) -> PolicyDetails:
        """A new policy `name` whose head is the revision `address` resolves to."""
        return self._call("catalog_fork", {"address": str(address), "name": str(name)},
                          _convert.policy_details)

    def tag(self, address: str, add: Sequence[str] = (), remove: Sequence[str] = ()) -> PolicyDetails:
        body = {"address": str(address), "add": [str(t) for t in add],
                "remove": [str(t) for t in remove]}
        return self._call("catalog_tag", body, _convert.policy_details)

    def rollback(self, address: str) -> PolicyDetails:
        """Moves the policy's head to the revision `address` names."""
        return self._call("catalog_rollback", {"address": str(address)}, _convert.policy_details)

    def delete(self, address: str) -> None:
        self._call("catalog_delete", {"address": str(address)}, lambda _: None)

    def import_peft(self, directory: str | Path, name: str, base_id: str = "",
                    description: str = "") -> PolicyDetails:
        """Imports a PEFT LoRA directory (adapter_config.json + adapter_model.safetensors) as
        a new policy `name` on `base_id` ("" = the daemon's default base)."""
        directory = Path(directory)
        config = (directory / PEFT_CONFIG).read_text()
        json.loads(config)  # fail here, naming the file, rather than on the daemon
        frames = _wire.FrameBuilder()
        body = {"name": str(name), "base_id": str(base_id), "adapter_config_json": config,
                "adapter_model": frames.add_bytes((directory / PEFT_MODEL).read_bytes()),
                "description": str(description)}
        return self._call("import_peft", body, _convert.policy_details, frames)

    def export_peft(self, address: str, directory: str | Path) -> ExportPeftResponse:
        """Writes the revision as a PEFT directory (created if missing)."""
        reply = self._call("export_peft", {"address": str(address)}, lambda r: r)
        model = _wire.read_tensor(reply.body["adapter_model"], reply.frames, "adapter_model")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / PEFT_CONFIG).write_text(str(reply.body.get("adapter_config_json", "")))
        (directory / PEFT_MODEL).write_bytes(model.tobytes())
        return ExportPeftResponse(revision_id=str(reply.body.get("revision_id", "")),
                                  directory=str(directory))

    # ---- GRPO runs -----------------------------------------------------------------------

    def start_run(self, config: dict | str, resume: bool = False) -> "_runs.RunStartResponse":
        """Starts a GRPO run on the daemon (config: spindle grpo's run config, a dict or JSON
        text; its tenant is the caller's). resume=True continues policies that already have
        revisions (e.g. a fork() of a revision) from their heads."""
        text = config if isinstance(config, str) else json.dumps(config)
        body = self._call("run_start", {"config_json": text, "resume": bool(resume)},
                          lambda r: r.body)
        return _runs.RunStartResponse(run_id=str(body.get("run_id", "")),
                                      policies=[str(p) for p in body.get("policies", [])])

    def list_runs(self, limit: int = 50, cursor: str = "") -> "_runs.RunListResponse":
        """One page of the caller's runs, newest first; pass next_cursor for the next."""
        body = self._call("run_list", {"limit": int(limit), "cursor": str(cursor)}, lambda r: r.body)
        return _runs.RunListResponse(runs=[_runs.run_info(x) for x in body.get("runs", [])],
                                     next_cursor=str(body.get("next_cursor", "")))

    def run_status(self, run_id: str, metrics_since_step: int = 0) -> "_runs.RunStatus":
        """The run record and its metrics rows with step >= metrics_since_step."""
        return self._call("run_status", {"run_id": str(run_id),
                                         "metrics_since_step": int(metrics_since_step)},
                          lambda r: _runs.run_status(r.body))

    def stop_run(self, run_id: str) -> "_runs.RunStatus":
        """Asks the run to stop after its step in progress (it saves, then becomes stopped)."""
        return self._call("run_stop", {"run_id": str(run_id)}, lambda r: _runs.run_status(r.body))

    def resume_run(self, run_id: str) -> "_runs.RunStatus":
        """Continues a stopped or failed run from its policies' last saved revisions."""
        return self._call("run_resume", {"run_id": str(run_id)}, lambda r: _runs.run_status(r.body))

    # ---- reward test ---------------------------------------------------------------------

    def reward_test(self, spec: dict | str, rows: Sequence["_rewards.RewardRow | dict | str"],
                    address: str, num_samples: int = 4,
                    sampling_params: SamplingParams | None = None,
                    bins: int = 10) -> "_rewards.RewardTestResponse":
        """Samples num_samples completions of every row from `address` (a policy address or a
        bare base id) and scores them with the reward spec on the daemon (its reward plugins):
        the per-term and total score distributions and every scored sample. spec: a dict or
        JSON text {"terms": [...]}; rows: RewardRow, dicts with "prompt" (and optionally
        "reference", "metadata"), or prompt strings. A spec that does not validate fails with
        SpindleError("invalid_argument") naming the term, before anything is sampled.
        sampling_params None: SamplingParams(max_tokens=REWARD_TEST_MAX_TOKENS); reward_test
        needs max_tokens >= 1."""
        spec_json = spec if isinstance(spec, str) else json.dumps(spec)
        wire_rows = []
        for row in rows:
            if isinstance(row, str):
                row = _rewards.RewardRow(prompt=row)
            elif isinstance(row, dict):
                row = _rewards.RewardRow(prompt=row["prompt"], reference=row.get("reference", ""),
                                         metadata=row.get("metadata"))
            metadata = row.metadata
            if metadata is None:
                metadata = ""
            elif not isinstance(metadata, str):
                metadata = json.dumps(metadata)
            wire_rows.append({"prompt": str(row.prompt), "reference": str(row.reference or ""),
                              "metadata_json": metadata})
        body = {"spec_json": spec_json, "rows": wire_rows, "address": str(address),
                "num_samples": int(num_samples),
                "sampling_params": _convert.sampling_params_body(
                    sampling_params or SamplingParams(max_tokens=REWARD_TEST_MAX_TOKENS)),
                "bins": int(bins)}
        return self._call("reward_test", body, _rewards.reward_test_response)

    # ---- Studio: plugins, datasets, events -----------------------------------------------

    def reward_plugins(self) -> list["_studio.RewardPlugin"]:
        """The reward plugins the daemon's reward host finds, sorted by name."""
        return self._call("reward_plugins", {}, _streams.reward_plugins)

    def plugin_rescan(self) -> list["_studio.RewardPlugin"]:
        """Makes the daemon rescan its plugin folders (picking up .so files added since it
        started; reward tests and GRPO runs started afterwards use them), then lists them."""
        return self._call("plugin_rescan", {}, _streams.reward_plugins)

    def datasets(self, examples: int = 3) -> list["_studio.DatasetInfo"]:
        """The daemon's built-in prompt datasets (arith, gsm8k, countdown) with availability,
        row counts and the first `examples` (0..20) train rows."""
        return self._call("datasets", {"examples": int(examples)}, _streams.datasets)

    def subscribe(self, topics: Sequence[str] = ()) -> "_streams.Subscription":
        """Streams the caller's tenant's events on this client's connection (works over TCP
        with CURVE): topics "metrics" (GRPO run steps) and/or "residency" (the tenant's adapter
        placements); empty = both. Returns once the subscription is live; iterate it for
        Event objects; close() ends it."""
        stream = self._transport.submit_stream("subscribe", {"topics": [str(t) for t in topics]})
        return _streams.Subscription(self, stream)

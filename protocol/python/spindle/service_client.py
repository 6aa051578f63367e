"""ServiceClient: the connection to one spindled (Tinker's ServiceClient) plus catalog helpers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from . import _config, _convert, _streams, _wire
from ._futures import APIFuture
from ._transport import CurveKeys, Transport
from .errors import INVALID_ARGUMENT, SpindleError
from .sampling_client import SamplingClient
from .training_client import TrainingClient
from .types import (ExportPeftResponse, HandshakeInfo, LineageResponse, PolicyDetails,
                    PolicyListResponse, SamplingParams, ServerCapabilities, ServerStatus)
from .types import _rewards, _runs, _studio
from .types._records import from_wire

T = TypeVar("T")

PEFT_CONFIG = "adapter_config.json"
PEFT_MODEL = "adapter_model.safetensors"


class ServiceClient:
    """Connects (DEALER) to `endpoint` and shakes hands, so a wrong token fails here with
    SpindleError("unauthenticated") and an absent daemon with SpindleError("timeout") after
    `connect_timeout_s`.

    endpoint/token default to $SPINDLE_ENDPOINT / $SPINDLE_TOKEN, else the local daemon of the
    data dir (ipc://<data_dir>/spindled.sock and <data_dir>/token). For tcp:// endpoints pass
    server_public_key (z85; printed by spindled, in <data_dir>/curve/server.pub) and
    client_keys=(public, secret) whose public key is on the daemon's allow-list.

    One background thread owns the socket; every method is thread-safe and returns quickly
    (futures) or blocks only on its own reply. Use as a context manager or call close()."""

    def __init__(self, endpoint: str | None = None, token: str | None = None,
                 server_public_key: str | None = None,
                 client_keys: tuple[str, str] | None = None, *,
                 connect_timeout_s: float = 30.0, max_overloaded_retries: int = 100,
                 client_name: str = "spindle-python") -> None:
        self.endpoint = endpoint or _config.default_endpoint()
        curve = None
        if server_public_key:
            if not client_keys:
                import zmq
                public, secret = zmq.curve_keypair()
                client_keys = (public.decode("ascii"), secret.decode("ascii"))
            curve = CurveKeys(server_public_key, client_keys[0], client_keys[1])
        self._transport = Transport(self.endpoint, token if token is not None else _config.default_token(),
                                    curve, max_overloaded_retries)
        try:
            self.server: HandshakeInfo = self._request(
                "handshake", {"client_name": client_name}, None,
                lambda r: from_wire(HandshakeInfo, r.body)).result(connect_timeout_s)
        except BaseException:
            self._transport.close()
            raise

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

    def close(self) -> None:
        """Stops the I/O thread; requests still in flight fail with SpindleError("closed")."""
        self._transport.close()

    def __enter__(self) -> "ServiceClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- server --------------------------------------------------------------------------

    def get_server_capabilities(self) -> ServerCapabilities:
        return self._call("capabilities", {}, _convert.capabilities)

    async def get_server_capabilities_async(self) -> ServerCapabilities:
        return await self._request("capabilities", {}, None, _convert.capabilities)

    def status(self) -> ServerStatus:
        return self._call("status", {}, _convert.status)

    # ---- training and sampling -----------------------------------------------------------

    def _create_training_future(self, base_model: str, rank: int, seed: int | None,
                                train_mlp: bool, train_attn: bool, train_unembed: bool,
                                alpha: float | None, policy: str | None,
                                description: str) -> APIFuture[TrainingClient]:
        body = {"base_model": str(base_model), "policy": policy or "", "rank": int(rank),
                "alpha": float(rank if alpha is None else alpha), "train_attn": bool(train_attn),
                "train_mlp": bool(train_mlp), "train_unembed": bool(train_unembed),
                "seed": _convert.random_seed() if seed is None else int(seed),
                "description": str(description)}
        return self._request("create_training", body, None,
                             lambda r: TrainingClient(self, _convert.session_info(r)))

    def create_lora_training_client(self, base_model: str, rank: int = 32, seed: int | None = None,
                                    train_mlp: bool = True, train_attn: bool = True,
                                    train_unembed: bool = False, alpha: float | None = None,
                                    policy: str | None = None,
                                    description: str = "") -> TrainingClient:
        """Creates policy `policy` (a generated name when None) on `base_model` and a training
        session on it. alpha None = rank (scale 1); seed None = random LoRA init."""
        return self._create_training_future(base_model, rank, seed, train_mlp, train_attn,
                                            train_unembed, alpha, policy, description).result()

    async def create_lora_training_client_async(self, base_model: str, rank: int = 32,
                                                seed: int | None = None, train_mlp: bool = True,
                                                train_attn: bool = True,
                                                train_unembed: bool = False,
                                                alpha: float | None = None,
                                                policy: str | None = None,
                                                description: str = "") -> TrainingClient:
        return await self._create_training_future(base_model, rank, seed, train_mlp, train_attn,
                                                  train_unembed, alpha, policy, description)

    def create_training_client_from_state(self, path: str) -> TrainingClient:
        """A new session on the policy of revision `path`, with its weights and (when saved
        with save_state) optimizer state."""
        return self._call("create_training_from_state", {"address": str(path)},
                          lambda r: TrainingClient(self, _convert.session_info(r)))

    def create_sampling_client(self, model_path: str | None = None,
                               base_model: str | None = None) -> SamplingClient:
        """model_path: a policy or revision address; base_model: a base id (no adapter)."""
        if bool(model_path) == bool(base_model):
            raise SpindleError(INVALID_ARGUMENT, "pass exactly one of model_path and base_model")
        return SamplingClient(self, model_path or base_model)  # type: ignore[arg-type]

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
        SpindleError("invalid_argument") naming the term, before anything is sampled."""
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
                "sampling_params": _convert.sampling_params_body(sampling_params or SamplingParams()),
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

"""RestClient: Tinker's checkpoint and training-run listing, over Spindle's catalog.

Tinker's names map onto the catalog so:
  training run  = a policy; training_run_id = its address, spindle://tenant/policy (a bare
                  policy name is accepted too)
  checkpoint    = a revision; checkpoint_id = the revision id, tinker_path = its address
                  spindle://tenant/policy@revision; checkpoint_type "training" when it holds
                  optimizer state (save_state), else "sampler"

  get_training_run(_by_tinker_path)   catalog_show (+ catalog_lineage for its revisions)
  list_training_runs                  catalog_list pages (offset/limit over the whole list)
  list_checkpoints                    catalog_show's recent revisions + catalog_lineage of the head
  list_user_checkpoints               the same over every policy, newest first
  get_weights_info_by_tinker_path     catalog_show
  set_checkpoint_ttl_from_tinker_path ttl_seconds=None: catalog_promote (ephemeral -> durable)

Every other RestClient call raises UnprocessableEntityError (a SpindleError, code
"unsupported") naming the call and why. Calls return APIFutures (`.result()`, or await them);
the listings that take several requests run on a small thread pool.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from ._futures import APIFuture
from .errors import unsupported
from .types import (Checkpoint, CheckpointsListResponse, Cursor, PolicyDetails, PolicyInfo,
                    RevisionInfo, TrainingRun, TrainingRunsResponse, WeightsInfoResponse)

if TYPE_CHECKING:
    from .service_client import ServiceClient

LIST_PAGE = 1000  # catalog_list's largest page
LINEAGE_DEPTH = 1000


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc)


def checkpoint_of(policy: PolicyInfo, rev: RevisionInfo) -> Checkpoint:
    try:
        name = str(json.loads(rev.metrics_json).get("name", "")) if rev.metrics_json else ""
    except (ValueError, AttributeError):
        name = ""
    return Checkpoint(checkpoint_id=rev.id, checkpoint_type="training" if rev.has_state else "sampler",
                      time=_time(rev.created_ms), tinker_path=f"{policy.address}@{rev.id}",
                      size_bytes=rev.bytes, public=False,
                      expires_at=_time(rev.expires_ms) if rev.expires_ms else None,
                      training_run_id=policy.address, step=rev.step, name=name,
                      expired=rev.expired)


def training_run_of(policy: PolicyInfo, checkpoints: List[Checkpoint]) -> TrainingRun:
    live = [c for c in checkpoints if not c.expired]

    def newest(kind: str) -> Optional[Checkpoint]:
        return next((c for c in live if c.checkpoint_type == kind), None)

    metadata = json.loads(policy.user_metadata_json) if policy.user_metadata_json else None
    return TrainingRun(training_run_id=policy.address, base_model=policy.base_id,
                       model_owner=policy.tenant, is_lora=True,
                       last_request_time=_time(policy.updated_ms or policy.created_ms),
                       lora_rank=int(policy.rank), last_checkpoint=newest("training"),
                       last_sampler_checkpoint=newest("sampler"), user_metadata=metadata)


class RestClient:
    def __init__(self, service: "ServiceClient") -> None:
        self._service = service
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="spindle-rest")

    # ---- plumbing ------------------------------------------------------------------------

    def _run(self, fn: Callable[[], Any]) -> APIFuture:
        return APIFuture.from_call(self._pool, fn)

    def _policy_address(self, training_run_id: str) -> str:
        run = str(training_run_id).split("@", 1)[0]
        if run.startswith("spindle://"):
            return run
        return f"spindle://{self._service.server.tenant}/{run}"

    def _checkpoints(self, details: PolicyDetails) -> List[Checkpoint]:
        """Every revision of the policy: its newest (catalog_show) and the head's ancestors on
        the policy (catalog_lineage), newest first."""
        policy = details.policy
        revisions = {r.id: r for r in details.recent}
        if policy.head:
            lineage = self._service.lineage(f"{policy.address}@{policy.head}",
                                            max_ancestors=LINEAGE_DEPTH, max_descendants=0)
            for r in [lineage.revision] + [e.revision for e in lineage.ancestors]:
                if r.id and r.policy in (policy.name, policy.address):
                    revisions.setdefault(r.id, r)
        ordered = sorted(revisions.values(), key=lambda r: (r.created_ms, r.step), reverse=True)
        return [checkpoint_of(policy, r) for r in ordered]

    def _details(self, address: str) -> PolicyDetails:
        """catalog_show of the policy a training run id or tinker path names (a policy whose
        head expired still shows, its revision marked expired)."""
        return self._service.show(self._policy_address(address))

    def _all_policies(self) -> List[PolicyInfo]:
        out: List[PolicyInfo] = []
        cursor = ""
        while True:
            page = self._service.list_policies(limit=LIST_PAGE, cursor=cursor)
            out.extend(page.policies)
            cursor = page.next_cursor
            if not cursor:
                return out

    def _training_run(self, address: str) -> TrainingRun:
        details = self._details(address)
        return training_run_of(details.policy, self._checkpoints(details))

    # ---- training runs -------------------------------------------------------------------

    def get_training_run(self, training_run_id: str, access_scope: str = "owned"
                         ) -> APIFuture[TrainingRun]:
        return self._run(lambda: self._training_run(training_run_id))

    async def get_training_run_async(self, training_run_id: str,
                                     access_scope: str = "owned") -> TrainingRun:
        return await self.get_training_run(training_run_id, access_scope)

    def get_training_run_by_tinker_path(self, tinker_path: str, access_scope: str = "owned"
                                        ) -> APIFuture[TrainingRun]:
        return self._run(lambda: self._training_run(tinker_path))

    async def get_training_run_by_tinker_path_async(self, tinker_path: str,
                                                    access_scope: str = "owned") -> TrainingRun:
        return await self.get_training_run_by_tinker_path(tinker_path, access_scope)

    def list_training_runs(self, limit: int = 20, offset: int = 0, access_scope: str = "owned",
                           project_id: str | None = None) -> APIFuture[TrainingRunsResponse]:
        """The caller's policies in catalog order, `limit` from `offset`."""
        def run() -> TrainingRunsResponse:
            policies = self._all_policies()
            page = policies[offset: offset + limit]
            runs = [training_run_of(p, self._checkpoints(self._details(p.address))) for p in page]
            return TrainingRunsResponse(training_runs=runs,
                                        cursor=Cursor(offset=offset, limit=limit,
                                                      total_count=len(policies)))
        return self._run(run)

    async def list_training_runs_async(self, limit: int = 20, offset: int = 0,
                                       access_scope: str = "owned",
                                       project_id: str | None = None) -> TrainingRunsResponse:
        return await self.list_training_runs(limit, offset, access_scope, project_id)

    # ---- checkpoints ---------------------------------------------------------------------

    def list_checkpoints(self, training_run_id: str) -> APIFuture[CheckpointsListResponse]:
        """Every revision of the policy, newest first (expired ones too, flagged `expired`)."""
        def run() -> CheckpointsListResponse:
            details = self._details(training_run_id)
            return CheckpointsListResponse(checkpoints=self._checkpoints(details))
        return self._run(run)

    async def list_checkpoints_async(self, training_run_id: str) -> CheckpointsListResponse:
        return await self.list_checkpoints(training_run_id)

    def list_user_checkpoints(self, limit: int = 100, offset: int = 0
                              ) -> APIFuture[CheckpointsListResponse]:
        """Every revision of every policy of the caller's tenant, newest first."""
        def run() -> CheckpointsListResponse:
            everything: List[Checkpoint] = []
            for p in self._all_policies():
                everything.extend(self._checkpoints(self._details(p.address)))
            everything.sort(key=lambda c: c.time, reverse=True)
            return CheckpointsListResponse(checkpoints=everything[offset: offset + limit],
                                           cursor=Cursor(offset=offset, limit=limit,
                                                         total_count=len(everything)))
        return self._run(run)

    async def list_user_checkpoints_async(self, limit: int = 100,
                                          offset: int = 0) -> CheckpointsListResponse:
        return await self.list_user_checkpoints(limit, offset)

    def get_weights_info_by_tinker_path(self, tinker_path: str) -> APIFuture[WeightsInfoResponse]:
        def run() -> WeightsInfoResponse:
            policy = self._details(tinker_path).policy
            targets = set(policy.targets)
            attn = bool(targets & {"q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj",
                                    "kv_a_proj_with_mqa", "kv_b_proj", "wq", "wk", "wv", "wo"})
            mlp = bool(targets & {"gate_proj", "up_proj", "down_proj", "w1", "w2", "w3"})
            return WeightsInfoResponse(base_model=policy.base_id, is_lora=True,
                                       lora_rank=int(policy.rank),
                                       train_unembed="lm_head" in targets, train_mlp=mlp,
                                       train_attn=attn)
        return self._run(run)

    def set_checkpoint_ttl_from_tinker_path(self, tinker_path: str,
                                            ttl_seconds: int | None) -> APIFuture[None]:
        """ttl_seconds None makes an ephemeral revision durable (catalog_promote); setting a
        new TTL is not supported (save with ttl_seconds instead)."""
        if ttl_seconds is not None:
            raise unsupported("set_checkpoint_ttl_from_tinker_path(ttl_seconds=N)",
                              "a revision's expiry is set when it is saved (ttl_seconds=); only "
                              "ttl_seconds=None (make it durable) is supported")
        return self._service._request("catalog_promote", {"address": str(tinker_path)}, None,
                                      lambda _: None)

    async def set_checkpoint_ttl_from_tinker_path_async(self, tinker_path: str,
                                                        ttl_seconds: int | None) -> None:
        return await self.set_checkpoint_ttl_from_tinker_path(tinker_path, ttl_seconds)

    # ---- not supported -------------------------------------------------------------------

    def delete_checkpoint(self, training_run_id: str, checkpoint_id: str) -> APIFuture[None]:
        raise unsupported("delete_checkpoint", _NO_REVISION_DELETE)

    async def delete_checkpoint_async(self, training_run_id: str, checkpoint_id: str) -> None:
        raise unsupported("delete_checkpoint_async", _NO_REVISION_DELETE)

    def delete_checkpoint_from_tinker_path(self, tinker_path: str) -> APIFuture[None]:
        raise unsupported("delete_checkpoint_from_tinker_path", _NO_REVISION_DELETE)

    async def delete_checkpoint_from_tinker_path_async(self, tinker_path: str) -> None:
        raise unsupported("delete_checkpoint_from_tinker_path_async", _NO_REVISION_DELETE)

    def __getattr__(self, name: str) -> Any:
        """Tinker's RestClient calls Spindle has no equivalent of: raise when called."""
        why = _UNSUPPORTED.get(name[: -len("_async")] if name.endswith("_async") else name)
        if why is None:
            raise AttributeError(name)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise unsupported(name, why)
        return refuse


_NO_REVISION_DELETE = ("the catalog deletes whole policies (ServiceClient.delete(policy_address)), "
                       "not single revisions; save with ttl_seconds= for revisions that go away "
                       "on their own")
_UNSUPPORTED = {
    "get_checkpoint_archive_url": "there is no download service; use "
                                  "ServiceClient.export_peft(address, directory)",
    "get_checkpoint_archive_url_from_tinker_path": "there is no download service; use "
                                                   "ServiceClient.export_peft(address, directory)",
    "publish_checkpoint_from_tinker_path": "revisions are private to their tenant",
    "unpublish_checkpoint_from_tinker_path": "revisions are private to their tenant",
    "get_audit_log": "the daemon keeps no audit log API",
    "get_session": "Spindle has no sessions grouping runs; see ServiceClient.status()",
    "list_sessions": "Spindle has no sessions grouping runs; see ServiceClient.status()",
    "assign_session_project": "Spindle has no projects",
    "export_session_trace": "the daemon records no request traces",
    "whoami": "the caller's tenant is ServiceClient.server.tenant",
    "get_sampler": "sampling clients hold no server-side session",
    "get_billing_usage": "Spindle does no billing",
}

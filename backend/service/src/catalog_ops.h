#pragma once
// Operations served on the catalog thread (catalog_*, import/export PEFT) and the conversions
// from catalog values to wire messages.

#include "daemon_state.h"

namespace spindle::service {

protocol::PolicyInfo policy_info(const catalog::Policy& p);
protocol::RevisionInfo revision_info(const catalog::Revision& r);

// Parses a client address in the caller's tenant (full spindle:// form or the short
// "<policy>[@rev]"). An address naming another tenant is logged and answered not_found, exactly
// like a missing policy (the catalog's own rule and message).
catalog::Address client_address(Daemon& d, catalog::Catalog& cat, const Call& call,
                                const std::string& text);

// Runs `op` on the catalog thread; whatever it throws becomes the call's typed error reply.
using CatalogThreadOp = void (*)(Daemon&, catalog::Catalog&, const Call&, const protocol::Request&);
void post_catalog_op(Daemon& d, Call call, protocol::Request request, CatalogThreadOp op);

// Posts the request to the catalog thread; the reply is sent from there.
void dispatch_catalog_op(Daemon& d, Call call, protocol::Request request);
// run_* ops (run_ops.cpp), also on the catalog thread.
void dispatch_run_op(Daemon& d, Call call, protocol::Request request);

}  // namespace spindle::service

// NodeIdentity is what an engine session knows of its daemon's place in the cluster, for engines
// that hand KV from one node to another (disaggregated prefill, "PD"): the node id and address
// its peers reach it by (sent to connectors at handshake, so a prefiller can name its node to the
// decoder), and whether a node id names a peer this daemon has admitted (a decoder's lookup
// names the node that prefilled). Empty when the daemon has no remote tier.
//
// Thread-safety: is_admitted_peer is called from the session thread and must be thread-safe.
// Ownership: a value; is_admitted_peer borrows whatever it queries, which must outlive every
// session.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace strata::storage::remote {
class RemoteNode;
}  // namespace strata::storage::remote

namespace strata::daemon {

struct NodeIdentity {
  std::string node_id;         // empty: no remote tier
  std::string remote_address;  // host:port peers dial
  // Null when there is no remote tier (then no node id is admitted).
  std::function<bool(std::string_view node_id)> is_admitted_peer;
  // How long a lookup naming its source node may wait for the peers' answers (it knows its KV
  // is on a peer); 0: the remote tier's own lookup budget.
  std::chrono::microseconds source_lookup_budget{0};
  // The node's side of the cluster, for the layer streams a prefiller's saves open to its
  // decoder's daemon (StoreItem.stream_to) and the streams a decoder's lookup waits for. Null
  // when there is no remote tier.
  storage::remote::RemoteNode* remote = nullptr;
};

}  // namespace strata::daemon

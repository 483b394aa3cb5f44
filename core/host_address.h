// The names a server gives others to reach it: this host's name, and the dialable address of a
// listener (a wildcard host replaced by that name). Plain functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace strata {

// This host's name (gethostname); "localhost" when it has none.
std::string HostName();

// "host:port" that other processes dial for a server listening on `listen_address` ("host:port",
// or ":port") and bound to `port` (which replaces the listen address's, e.g. its 0): the listen
// address's host, or this host's name when that host is empty or a wildcard (0.0.0.0, [::]).
std::string DialableAddress(std::string_view listen_address, int port);

}  // namespace strata

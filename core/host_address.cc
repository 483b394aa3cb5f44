#include "core/host_address.h"

#include <unistd.h>

#include "fmt/format.h"

namespace strata {

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

std::string DialableAddress(std::string_view listen_address, int port) {
  const size_t colon = listen_address.rfind(':');
  std::string host(colon == std::string_view::npos ? listen_address
                                                   : listen_address.substr(0, colon));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = HostName();
  return fmt::format("{}:{}", host, port);
}

}  // namespace strata

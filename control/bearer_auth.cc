#include "control/bearer_auth.h"

#include "fmt/format.h"
#include "grpcpp/server_context.h"
#include "openssl/crypto.h"

namespace strata::control {

absl::Status CheckBearerToken(const grpc::CallbackServerContext& context, std::string_view token,
                              std::string_view server) {
  if (token.empty() || context.peer().rfind("unix:", 0) == 0) return absl::OkStatus();
  const std::string expected = fmt::format("Bearer {}", token);
  const auto& metadata = context.client_metadata();
  for (auto [it, end] = metadata.equal_range("authorization"); it != end; ++it) {
    const grpc::string_ref& value = it->second;
    // Compared in full whatever the content, so the time says nothing about the token.
    if (value.size() == expected.size() &&
        CRYPTO_memcmp(value.data(), expected.data(), expected.size()) == 0) {
      return absl::OkStatus();
    }
  }
  return absl::UnauthenticatedError(fmt::format(
      "this {} requires a bearer token over TCP (authorization: Bearer <token>)", server));
}

void AttachBearerToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

}  // namespace strata::control

// Reading the files that secure a gRPC endpoint: bearer tokens, TLS certificates and keys, and
// the credentials built from them. Shared by stratad, strata-controller and their clients, so
// every process reads a token file the same way. Plain functions; thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace strata::control {

// The whole file, or kInvalidArgument naming `what` and the path when it cannot be read.
absl::StatusOr<std::string> ReadFileText(const std::string& path, const char* what);

// A secret kept in a file: its text without trailing whitespace. kInvalidArgument when the file
// cannot be read or holds nothing.
absl::StatusOr<std::string> ReadToken(const std::string& path, const char* what);

// TLS with the PEM certificate and key at these paths, or insecure credentials when both are
// empty. kInvalidArgument when one is set without the other or a file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const std::string& cert_path, const std::string& key_path);

// TLS trusting the PEM root certificate(s) at `ca_path`, or insecure credentials when it is
// empty. kInvalidArgument when the file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFile(
    const std::string& ca_path);

}  // namespace strata::control

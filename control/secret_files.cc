#include "control/secret_files.h"

#include <cctype>
#include <fstream>
#include <sstream>

#include "fmt/format.h"

namespace strata::control {

absl::StatusOr<std::string> ReadFileText(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(fmt::format("cannot read {} '{}'", what, path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::string> ReadToken(const std::string& path, const char* what) {
  absl::StatusOr<std::string> text = ReadFileText(path, what);
  if (!text.ok()) return text.status();
  std::string token = *std::move(text);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
    token.pop_back();
  }
  if (token.empty()) return absl::InvalidArgumentError(fmt::format("{} '{}' is empty", what, path));
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const std::string& cert_path, const std::string& key_path) {
  if (cert_path.empty() != key_path.empty()) {
    return absl::InvalidArgumentError("a TLS certificate and its key go together");
  }
  if (cert_path.empty()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadFileText(cert_path, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFileText(key_path, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFile(
    const std::string& ca_path) {
  if (ca_path.empty()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<std::string> pem = ReadFileText(ca_path, "TLS root certificate");
  if (!pem.ok()) return pem.status();
  return grpc::SslCredentials({.pem_root_certs = *pem});
}

}  // namespace strata::control

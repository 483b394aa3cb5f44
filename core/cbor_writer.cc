#include "core/cbor_writer.h"

namespace strata {

void CborWriter::Head(uint8_t major, uint64_t value) {
  const auto type = static_cast<char>(major << 5);
  if (value < 24) {
    buffer_.push_back(static_cast<char>(type | static_cast<char>(value)));
    return;
  }
  int num_bytes;
  char additional;
  if (value <= 0xff) {
    num_bytes = 1;
    additional = 24;
  } else if (value <= 0xffff) {
    num_bytes = 2;
    additional = 25;
  } else if (value <= 0xffffffffull) {
    num_bytes = 4;
    additional = 26;
  } else {
    num_bytes = 8;
    additional = 27;
  }
  buffer_.push_back(static_cast<char>(type | additional));
  for (int i = num_bytes - 1; i >= 0; --i) {
    buffer_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

void CborWriter::Bytes(std::span<const uint8_t> data) {
  Head(2, data.size());
  buffer_.append(reinterpret_cast<const char*>(data.data()), data.size());
}

void CborWriter::Text(std::string_view text) {
  Head(3, text.size());
  buffer_.append(text);
}

void CborWriter::UnsignedArray(std::span<const uint32_t> values) {
  ArrayHeader(values.size());
  // Hot path of sha256_cbor chain hashing: write heads straight into pre-sized storage.
  const size_t start = buffer_.size();
  buffer_.resize(start + values.size() * 5);
  auto* out = reinterpret_cast<uint8_t*>(buffer_.data() + start);
  for (uint32_t v : values) {
    if (v < 24) {
      *out++ = static_cast<uint8_t>(v);
    } else if (v <= 0xff) {
      *out++ = 0x18;
      *out++ = static_cast<uint8_t>(v);
    } else if (v <= 0xffff) {
      *out++ = 0x19;
      *out++ = static_cast<uint8_t>(v >> 8);
      *out++ = static_cast<uint8_t>(v);
    } else {
      *out++ = 0x1a;
      *out++ = static_cast<uint8_t>(v >> 24);
      *out++ = static_cast<uint8_t>(v >> 16);
      *out++ = static_cast<uint8_t>(v >> 8);
      *out++ = static_cast<uint8_t>(v);
    }
  }
  buffer_.resize(reinterpret_cast<char*>(out) - buffer_.data());
}

}  // namespace strata

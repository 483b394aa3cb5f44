// CborWriter appends canonical CBOR (RFC 8949 section 4.2.1: shortest-form heads, definite
// lengths) to a byte buffer: exactly the subset Python's cbor2.dumps(obj, canonical=True)
// produces for vLLM's block-hash tuples. Not thread-safe; reuse one per thread to avoid
// reallocation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace strata {

class CborWriter {
 public:
  void Clear() { buffer_.clear(); }
  const std::string& bytes() const { return buffer_; }

  void ArrayHeader(uint64_t num_items) { Head(4, num_items); }
  void Unsigned(uint64_t value) { Head(0, value); }
  void Bytes(std::span<const uint8_t> data);
  void Text(std::string_view text);
  void Null() { buffer_.push_back(static_cast<char>(0xf6)); }
  // An array of unsigned integers, e.g. token ids.
  void UnsignedArray(std::span<const uint32_t> values);

 private:
  // Appends a head with major type `major` and argument `value` in its shortest form.
  void Head(uint8_t major, uint64_t value);

  std::string buffer_;
};

}  // namespace strata

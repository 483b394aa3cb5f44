// ByteWriter and ByteReader: the little-endian binary encoding shared by Strata's small wire
// messages (the connector's metadata, the peer protocol): fixed-width integers, strings and
// arrays prefixed with their u32 length, nothing else. A reader never reads past its input and
// bounds every length before it allocates (a count is checked against the bytes left, and
// against a caller's maximum when given), so hostile input costs nothing. Each read returns
// false when the input cannot hold what is asked. Not thread-safe; cheap to construct.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

static_assert(std::endian::native == std::endian::little, "little-endian hosts only");

class ByteWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void I32(int32_t v) { Raw(&v, sizeof(v)); }
  void I64(int64_t v) { Raw(&v, sizeof(v)); }
  void String(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  template <class T>
  void Array(const std::vector<T>& values) {
    U32(static_cast<uint32_t>(values.size()));
    Raw(values.data(), values.size() * sizeof(T));
  }
  void Raw(const void* data, size_t size) { out_.append(static_cast<const char*>(data), size); }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}

  bool U8(uint8_t& v) { return Raw(&v, 1); }
  bool U32(uint32_t& v) { return Raw(&v, sizeof(v)); }
  bool U64(uint64_t& v) { return Raw(&v, sizeof(v)); }
  bool I64(int64_t& v) { return Raw(&v, sizeof(v)); }
  bool String(std::string& s, size_t max_bytes = std::numeric_limits<size_t>::max()) {
    uint32_t size;
    if (!U32(size) || size > in_.size() || size > max_bytes) return false;
    s.assign(in_.data(), size);
    in_.remove_prefix(size);
    return true;
  }
  template <class T>
  bool Array(std::vector<T>& values, size_t max_count = std::numeric_limits<size_t>::max()) {
    uint32_t count;
    if (!U32(count) || count > in_.size() / sizeof(T) || count > max_count) return false;
    values.resize(count);
    return Raw(values.data(), count * sizeof(T));
  }
  bool Raw(void* data, size_t size) {
    if (in_.size() < size) return false;
    if (size > 0) std::memcpy(data, in_.data(), size);
    in_.remove_prefix(size);
    return true;
  }
  bool empty() const { return in_.empty(); }
  size_t left() const { return in_.size(); }

 private:
  std::string_view in_;
};

}  // namespace strata

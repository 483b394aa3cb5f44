#include "storage/codec/codec.h"

namespace strata::storage {

std::string_view CodecIdName(CodecId id) {
  switch (id) {
    case CodecId::kInt8:
      return "int8";
    case CodecId::kKivi4:
      return "kivi4";
    case CodecId::kKivi2:
      return "kivi2";
    case CodecId::kCacheGen:
      return "cachegen";
    case CodecId::kXkv:
      return "xkv";
    case CodecId::kKivi8:
      return "kivi8";
    case CodecId::kDropSinkRecent:
      return "drop_sink_recent";
    case CodecId::kDropH2o:
      return "drop_h2o";
  }
  return "unknown";
}

}  // namespace strata::storage

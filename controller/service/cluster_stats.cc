#include "controller/service/cluster_stats.h"

#include <utility>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"

namespace strata::controller {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Whether two list elements stand for the same thing: their first fields (a key: an enum or a
// string) are equal.
bool SameKey(const Message& a, const Message& b) {
  const FieldDescriptor* key = a.GetDescriptor()->field(0);
  const Reflection* reflection = a.GetReflection();
  switch (key->cpp_type()) {
    case FieldDescriptor::CPPTYPE_ENUM:
      return reflection->GetEnumValue(a, key) == reflection->GetEnumValue(b, key);
    case FieldDescriptor::CPPTYPE_STRING:
      return reflection->GetString(a, key) == reflection->GetString(b, key);
    default:
      return false;
  }
}

void AddCounters(const Message& from, Message& into) {
  const Reflection* reflection = from.GetReflection();
  const google::protobuf::Descriptor* descriptor = from.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated()) {
      if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
      for (int j = 0; j < reflection->FieldSize(from, field); ++j) {
        const Message& element = reflection->GetRepeatedMessage(from, field, j);
        Message* match = nullptr;
        for (int k = 0; k < reflection->FieldSize(into, field) && match == nullptr; ++k) {
          Message* candidate = reflection->MutableRepeatedMessage(&into, field, k);
          if (SameKey(element, *candidate)) match = candidate;
        }
        if (match == nullptr) {
          reflection->AddMessage(&into, field)->CopyFrom(element);
        } else {
          AddCounters(element, *match);
        }
      }
      continue;
    }
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_UINT64:
        reflection->SetUInt64(
            &into, field, reflection->GetUInt64(into, field) + reflection->GetUInt64(from, field));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        reflection->SetUInt32(
            &into, field, reflection->GetUInt32(into, field) + reflection->GetUInt32(from, field));
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (reflection->HasField(from, field)) {
          AddCounters(reflection->GetMessage(from, field),
                      *reflection->MutableMessage(&into, field));
        }
        break;
      default:  // keys (a tier, a tenant): the element's own, kept
        break;
    }
  }
}

}  // namespace

void AddStats(const v1::StatsResponse& from, v1::StatsResponse& into) { AddCounters(from, into); }

v1::ClusterStatsResponse ClusterStats(v1::NodeCallResponse nodes, const ClusterIndexStats& index,
                                      const std::vector<v1::InstanceInfo>& members) {
  v1::ClusterStatsResponse response;
  response.set_instances(static_cast<uint32_t>(members.size()));
  uint32_t following = 0;
  for (const v1::InstanceInfo& member : members) following += member.following() ? 1 : 0;
  response.set_following(following);
  v1::ClusterIndexStats& indexed = *response.mutable_index();
  indexed.set_live_entries(index.live_entries);
  indexed.set_stale_entries(index.stale_entries);
  indexed.set_chunks(index.chunks);
  indexed.set_memory_bytes(index.memory_bytes);
  for (const v1::NodeResult& node : nodes.results()) {
    if (node.code() != 0 || !node.has_stats()) continue;
    AddStats(node.stats(), *response.mutable_totals());
    response.set_answered(response.answered() + 1);
  }
  *response.mutable_nodes() = std::move(*nodes.mutable_results());
  return response;
}

}  // namespace strata::controller

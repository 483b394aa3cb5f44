#include "controller/membership/instance_registry.h"

#include <algorithm>
#include <charconv>
#include <random>
#include <utility>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace strata::controller {
namespace {

absl::Status Bad(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

// "host:port" with a port in 1..65535, or "unix:path".
bool IsDialable(std::string_view endpoint) {
  if (endpoint.starts_with("unix:")) return endpoint.size() > 5;
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  const std::string_view port = endpoint.substr(colon + 1);
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return ec == std::errc() && end == port.data() + port.size() && value >= 1 && value <= 65535;
}

absl::Status CheckRegistration(const v1::RegisterInstanceRequest& r) {
  const std::string& id = r.instance_id();
  if (id.empty() || id.size() > kMaxInstanceIdBytes) {
    return Bad(fmt::format("instance_id must hold 1 to {} bytes (it holds {})", kMaxInstanceIdBytes,
                           id.size()));
  }
  if (std::any_of(id.begin(), id.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
    return Bad("instance_id must not hold control characters");
  }
  if (!IsDialable(r.control_endpoint())) {
    return Bad(fmt::format("control_endpoint '{}' is neither \"host:port\" nor \"unix:path\"",
                           r.control_endpoint().substr(0, kMaxEndpointBytes)));
  }
  for (const std::string* endpoint :
       {&r.control_endpoint(), &r.engine_endpoint(), &r.peer_address()}) {
    if (endpoint->size() > kMaxEndpointBytes) {
      return Bad(
          fmt::format("an endpoint of instance '{}' is over {} bytes", id, kMaxEndpointBytes));
    }
  }
  return absl::OkStatus();
}

// Another daemon claims a live registration's id: not the same daemon restarted, which would
// come back with the same endpoints.
bool ClaimsAnotherDaemonsId(const v1::RegisterInstanceRequest& held,
                            const v1::RegisterInstanceRequest& claim) {
  return held.control_endpoint() != claim.control_endpoint() ||
         held.peer_address() != claim.peer_address();
}

absl::Status UnknownLease(const std::string& instance_id, uint64_t lease_id) {
  return absl::NotFoundError(fmt::format(
      "instance '{}' holds no registration of lease {}: register again", instance_id, lease_id));
}

}  // namespace

absl::StatusOr<std::unique_ptr<InstanceRegistry>> InstanceRegistry::Create(
    InstanceRegistryOptions options) {
  if (!options.start_feed || options.clock == nullptr) {
    return Bad("an instance registry needs a feed starter and a clock");
  }
  if (options.instance_timeout.count() <= 0 ||
      options.heartbeat_interval >= options.instance_timeout ||
      options.heartbeat_interval.count() <= 0) {
    return Bad(fmt::format(
        "the heartbeat interval ({} ms) must be positive and below the instance timeout ({} ms)",
        options.heartbeat_interval.count(), options.instance_timeout.count()));
  }
  return std::unique_ptr<InstanceRegistry>(new InstanceRegistry(std::move(options)));
}

InstanceRegistry::InstanceRegistry(InstanceRegistryOptions options) : options_(std::move(options)) {
  {
    absl::MutexLock lock(&mu_);
    RebuildMembershipLocked();
  }
  // Leases of another controller run (or of one before a restart) are not taken for this one's.
  std::random_device random;
  absl::MutexLock lock(&changes_mu_);
  next_lease_ = (uint64_t{random()} << 32 | random()) | 1;
}

InstanceRegistry::~InstanceRegistry() { DropAll(); }

void InstanceRegistry::DropAll() {
  absl::MutexLock changes(&changes_mu_);
  absl::flat_hash_map<std::string, Member> members;
  {
    absl::MutexLock lock(&mu_);
    members.swap(members_);
    RebuildMembershipLocked();
  }
  members.clear();  // the feeds stop outside mu_
}

std::vector<std::string> InstanceRegistry::Adopt(std::span<const v1::InstanceRecord> records) {
  absl::MutexLock changes(&changes_mu_);
  std::vector<std::string> adopted;
  for (const v1::InstanceRecord& record : records) {
    const v1::RegisterInstanceRequest& registration = record.registration();
    if (absl::Status s = CheckRegistration(registration); !s.ok() || record.lease_id() == 0) {
      spdlog::warn("controller: a member record is not adopted: {}",
                   s.ok() ? std::string("it holds no lease") : s.ToString());
      continue;
    }
    {
      absl::ReaderMutexLock lock(&mu_);
      if (members_.contains(registration.instance_id())) continue;
    }
    absl::StatusOr<std::unique_ptr<DaemonFeed>> feed = options_.start_feed(registration);
    if (!feed.ok()) {
      spdlog::warn("controller: member '{}' is not adopted: {}", registration.instance_id(),
                   feed.status().ToString());
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      members_.emplace(registration.instance_id(), Member{.registration = registration,
                                                          .lease_id = record.lease_id(),
                                                          .last_heard = options_.clock->Now(),
                                                          .feed = *std::move(feed)});
      RebuildMembershipLocked();
    }
    adopted.push_back(registration.instance_id());
    spdlog::info("controller: instance '{}' adopted (control {}, lease {})",
                 registration.instance_id(), registration.control_endpoint(), record.lease_id());
  }
  return adopted;
}

void InstanceRegistry::Record(const v1::RegisterInstanceRequest& registration, uint64_t lease_id) {
  if (options_.member_store == nullptr) return;
  v1::InstanceRecord record;
  *record.mutable_registration() = registration;
  record.set_lease_id(lease_id);
  if (absl::Status s = options_.member_store->Record(record); !s.ok()) {
    spdlog::warn("controller: instance '{}' is not recorded for a successor: {}",
                 registration.instance_id(), s.ToString());
  }
}

void InstanceRegistry::Forget(const std::string& instance_id) {
  if (options_.member_store == nullptr) return;
  if (absl::Status s = options_.member_store->Forget(instance_id); !s.ok()) {
    spdlog::warn("controller: instance '{}' is not forgotten by the member store: {}", instance_id,
                 s.ToString());
  }
}

absl::StatusOr<v1::RegisterInstanceResponse> InstanceRegistry::Register(
    const v1::RegisterInstanceRequest& registration) {
  if (absl::Status s = CheckRegistration(registration); !s.ok()) return s;
  absl::MutexLock changes(&changes_mu_);
  std::unique_ptr<DaemonFeed> old_feed;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = members_.find(registration.instance_id()); it != members_.end()) {
      const Member& held = it->second;
      const auto silent = options_.clock->Now() - held.last_heard;
      if (silent < options_.instance_timeout &&
          ClaimsAnotherDaemonsId(held.registration, registration)) {
        return absl::AlreadyExistsError(fmt::format(
            "instance id '{}' is held by the daemon at control {} / peer '{}', heard from {} ms "
            "ago: give each daemon its own instance id ([cluster] instance_id); the id is free "
            "once its holder has been silent for {} ms",
            registration.instance_id(), held.registration.control_endpoint(),
            held.registration.peer_address(),
            std::chrono::duration_cast<std::chrono::milliseconds>(silent).count(),
            options_.instance_timeout.count()));
      }
      old_feed = std::move(it->second.feed);
      members_.erase(it);
      RebuildMembershipLocked();
    }
  }
  if (old_feed != nullptr) {
    old_feed.reset();  // drops the instance from the index before the new feed registers it
    spdlog::info("controller: instance '{}' registered again; its chunks are read afresh",
                 registration.instance_id());
  }
  absl::StatusOr<std::unique_ptr<DaemonFeed>> feed = options_.start_feed(registration);
  if (!feed.ok()) return feed.status();
  const uint64_t lease_id = next_lease_++;
  {
    absl::MutexLock lock(&mu_);
    members_.emplace(registration.instance_id(), Member{.registration = registration,
                                                        .lease_id = lease_id,
                                                        .last_heard = options_.clock->Now(),
                                                        .feed = *std::move(feed)});
    RebuildMembershipLocked();
  }
  spdlog::info("controller: instance '{}' registered (control {}, lease {})",
               registration.instance_id(), registration.control_endpoint(), lease_id);
  Record(registration, lease_id);
  v1::RegisterInstanceResponse response;
  *response.mutable_membership() = *Membership();
  response.set_lease_id(lease_id);
  response.set_heartbeat_interval_ms(static_cast<uint32_t>(options_.heartbeat_interval.count()));
  response.set_instance_timeout_ms(static_cast<uint32_t>(options_.instance_timeout.count()));
  return response;
}

absl::Status InstanceRegistry::Heartbeat(const std::string& instance_id, uint64_t lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(instance_id);
  if (it == members_.end() || it->second.lease_id != lease_id) {
    return UnknownLease(instance_id, lease_id);
  }
  it->second.last_heard = options_.clock->Now();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DaemonFeed>> InstanceRegistry::RemoveLocked(
    const std::string& instance_id, uint64_t lease_id) {
  auto it = members_.find(instance_id);
  if (it == members_.end() || it->second.lease_id != lease_id) {
    return UnknownLease(instance_id, lease_id);
  }
  std::unique_ptr<DaemonFeed> feed = std::move(it->second.feed);
  members_.erase(it);
  RebuildMembershipLocked();
  return feed;
}

absl::Status InstanceRegistry::Deregister(const std::string& instance_id, uint64_t lease_id) {
  absl::MutexLock changes(&changes_mu_);
  absl::StatusOr<std::unique_ptr<DaemonFeed>> feed;
  {
    absl::MutexLock lock(&mu_);
    feed = RemoveLocked(instance_id, lease_id);
  }
  if (!feed.ok()) return feed.status();
  feed->reset();
  Forget(instance_id);
  spdlog::info("controller: instance '{}' deregistered", instance_id);
  return absl::OkStatus();
}

std::vector<std::string> InstanceRegistry::ExpireSilent() {
  absl::MutexLock changes(&changes_mu_);
  std::vector<std::string> expired;
  std::vector<std::unique_ptr<DaemonFeed>> feeds;
  {
    absl::MutexLock lock(&mu_);
    const MonoTime now = options_.clock->Now();
    for (auto it = members_.begin(); it != members_.end();) {
      if (now - it->second.last_heard < options_.instance_timeout) {
        ++it;
        continue;
      }
      expired.push_back(it->first);
      feeds.push_back(std::move(it->second.feed));
      members_.erase(it++);
    }
    if (!expired.empty()) RebuildMembershipLocked();
  }
  feeds.clear();  // the instances leave the index
  for (const std::string& id : expired) {
    spdlog::warn("controller: instance '{}' sent no heartbeat for {} ms; dropped", id,
                 options_.instance_timeout.count());
    Forget(id);
  }
  return expired;
}

v1::InstanceInfo InstanceRegistry::InfoLocked(const Member& member) const {
  v1::InstanceInfo info;
  const v1::RegisterInstanceRequest& r = member.registration;
  info.set_instance_id(r.instance_id());
  info.set_control_endpoint(r.control_endpoint());
  info.set_engine_endpoint(r.engine_endpoint());
  info.set_peer_address(r.peer_address());
  info.set_lease_id(member.lease_id);
  const auto silent = options_.clock->Now() - member.last_heard;
  info.set_ms_since_heartbeat(static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(silent).count())));
  const DaemonFeedStats stats = member.feed->stats();
  info.set_following(stats.following);
  info.set_daemon_epoch(stats.epoch);
  info.set_snapshots(stats.snapshots);
  info.set_events_applied(stats.events_applied);
  return info;
}

absl::StatusOr<v1::InstanceInfo> InstanceRegistry::Query(const std::string& instance_id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = members_.find(instance_id);
  if (it == members_.end()) {
    return absl::NotFoundError(fmt::format("instance '{}' is not registered", instance_id));
  }
  return InfoLocked(it->second);
}

std::vector<v1::InstanceInfo> InstanceRegistry::List() const {
  std::vector<v1::InstanceInfo> infos;
  {
    absl::ReaderMutexLock lock(&mu_);
    infos.reserve(members_.size());
    for (const auto& [id, member] : members_) infos.push_back(InfoLocked(member));
  }
  std::sort(infos.begin(), infos.end(), [](const v1::InstanceInfo& a, const v1::InstanceInfo& b) {
    return a.instance_id() < b.instance_id();
  });
  return infos;
}

size_t InstanceRegistry::following() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<size_t>(std::count_if(members_.begin(), members_.end(), [](const auto& entry) {
    return entry.second.feed->stats().following;
  }));
}

std::shared_ptr<const v1::Membership> InstanceRegistry::Membership() const {
  absl::ReaderMutexLock lock(&mu_);
  return membership_;
}

void InstanceRegistry::RebuildMembershipLocked() {
  auto membership = std::make_shared<v1::Membership>();
  for (const auto& [id, member] : members_) {
    if (member.registration.peer_address().empty()) continue;
    v1::PeerMember* peer = membership->add_members();
    peer->set_instance_id(id);
    peer->set_peer_address(member.registration.peer_address());
  }
  std::sort(membership->mutable_members()->begin(), membership->mutable_members()->end(),
            [](const v1::PeerMember& a, const v1::PeerMember& b) {
              return a.instance_id() < b.instance_id();
            });
  // Ids and addresses hold no NUL (ids no control characters; addresses are "host:port").
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const v1::PeerMember& peer : membership->members()) {
    XXH3_64bits_update(state, peer.instance_id().data(), peer.instance_id().size() + 1);
    XXH3_64bits_update(state, peer.peer_address().data(), peer.peer_address().size() + 1);
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  membership->set_digest(digest == 0 ? 1 : digest);
  membership_ = std::move(membership);
}

size_t InstanceRegistry::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return members_.size();
}

}  // namespace strata::controller

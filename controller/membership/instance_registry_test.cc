#include "controller/membership/instance_registry.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

namespace strata::controller {
namespace {

using namespace std::chrono_literals;

v1::RegisterInstanceRequest Registration(const std::string& id,
                                         const std::string& control = "127.0.0.1:1") {
  v1::RegisterInstanceRequest r;
  r.set_instance_id(id);
  r.set_control_endpoint(control);
  r.set_engine_endpoint("/run/strata/engine.sock");
  r.set_peer_address("10.0.0.1:7000");
  return r;
}

// Feeds dial a port nothing listens on: they register their instance in the index and keep
// retrying, which is all the registry needs of them.
class InstanceRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    index_ = *ClusterIndex::Create({.max_instances = 2, .shard_count = 1});
    registry_ = MakeRegistry(nullptr);
  }

  std::unique_ptr<InstanceRegistry> MakeRegistry(MemberStore* member_store) {
    return *InstanceRegistry::Create(
        {.start_feed =
             [this](const v1::RegisterInstanceRequest& r) {
               ++feeds_started_;
               return DaemonFeed::Start(
                   {.instance_id = r.instance_id(),
                    .channel = grpc::CreateChannel(r.control_endpoint(),
                                                   grpc::InsecureChannelCredentials()),
                    .index = index_.get(),
                    .retry_delay = 20ms});
             },
         .instance_timeout = 1000ms,
         .heartbeat_interval = 200ms,
         .member_store = member_store,
         .clock = &clock_});
  }

  ManualClock clock_;
  std::unique_ptr<ClusterIndex> index_;
  int feeds_started_ = 0;
  std::unique_ptr<InstanceRegistry> registry_;
};

// The records in memory, as etcd keeps them for the controller (EtcdMemberStore, tested against
// a real etcd in controller_ha_test).
class MemoryMemberStore : public MemberStore {
 public:
  absl::Status Record(const v1::InstanceRecord& record) override {
    records_[record.registration().instance_id()] = record;
    return absl::OkStatus();
  }
  absl::Status Forget(const std::string& instance_id) override {
    records_.erase(instance_id);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<v1::InstanceRecord>> Load() override {
    std::vector<v1::InstanceRecord> records;
    for (const auto& [id, record] : records_) records.push_back(record);
    return records;
  }
  std::map<std::string, v1::InstanceRecord> records_;
};

TEST_F(InstanceRegistryTest, ASuccessorAdoptsTheRecordedMembersWithTheirLeases) {
  MemoryMemberStore store;
  std::unique_ptr<InstanceRegistry> leader = MakeRegistry(&store);
  absl::StatusOr<v1::RegisterInstanceResponse> a = leader->Register(Registration("a"));
  absl::StatusOr<v1::RegisterInstanceResponse> b = leader->Register(Registration("b"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(store.records_.size(), 2u);
  EXPECT_EQ(store.records_["a"].lease_id(), a->lease_id());
  EXPECT_EQ(store.records_["b"].registration().peer_address(), "10.0.0.1:7000");
  // Stepping down forgets the members here, not in the store.
  leader->DropAll();
  EXPECT_EQ(leader->size(), 0u);
  EXPECT_EQ(store.records_.size(), 2u);

  // The successor: "b" registered with it already (its record is newer); a record without a
  // lease and one with a bad endpoint are not adopted.
  std::unique_ptr<InstanceRegistry> successor = MakeRegistry(&store);
  absl::StatusOr<v1::RegisterInstanceResponse> b_again = successor->Register(Registration("b"));
  ASSERT_TRUE(b_again.ok());
  v1::InstanceRecord no_lease;
  *no_lease.mutable_registration() = Registration("c");
  v1::InstanceRecord bad_endpoint;
  *bad_endpoint.mutable_registration() = Registration("d", "nowhere");
  bad_endpoint.set_lease_id(7);
  std::vector<v1::InstanceRecord> records = *store.Load();
  records.push_back(no_lease);
  records.push_back(bad_endpoint);
  EXPECT_EQ(successor->Adopt(records), std::vector<std::string>{"a"});
  EXPECT_EQ(successor->Query("a")->lease_id(), a->lease_id());
  EXPECT_EQ(successor->Query("b")->lease_id(), b_again->lease_id());
  EXPECT_TRUE(successor->Heartbeat("a", a->lease_id()).ok()) << "the lease carries on";
  EXPECT_EQ(successor->Heartbeat("b", b->lease_id()).code(), absl::StatusCode::kNotFound);

  // An adopted member counts as just heard from; silent for the timeout, it is dropped and
  // forgotten; a deregistered one too.
  clock_.Advance(600ms);
  ASSERT_TRUE(successor->Heartbeat("b", b_again->lease_id()).ok());
  clock_.Advance(500ms);
  EXPECT_EQ(successor->ExpireSilent(), std::vector<std::string>{"a"});
  EXPECT_FALSE(store.records_.contains("a"));
  ASSERT_TRUE(successor->Deregister("b", b_again->lease_id()).ok());
  EXPECT_TRUE(store.records_.empty());
}

TEST_F(InstanceRegistryTest, ARegistrationIsIndexedAndKeptByHeartbeats) {
  absl::StatusOr<v1::RegisterInstanceResponse> registered = registry_->Register(Registration("a"));
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->heartbeat_interval_ms(), 200u);
  EXPECT_EQ(registered->instance_timeout_ms(), 1000u);
  EXPECT_EQ(index_->stats().instances, 1u);

  absl::StatusOr<v1::InstanceInfo> info = registry_->Query("a");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->control_endpoint(), "127.0.0.1:1");
  EXPECT_EQ(info->engine_endpoint(), "/run/strata/engine.sock");
  EXPECT_EQ(info->peer_address(), "10.0.0.1:7000");
  EXPECT_EQ(info->lease_id(), registered->lease_id());
  EXPECT_FALSE(info->following()) << "nothing answers at its endpoint";

  // Heartbeats keep it past the timeout; a wrong lease does not.
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(900ms);
    ASSERT_TRUE(registry_->Heartbeat("a", registered->lease_id()).ok());
    EXPECT_TRUE(registry_->ExpireSilent().empty());
  }
  EXPECT_EQ(registry_->Heartbeat("a", registered->lease_id() + 1).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->Heartbeat("b", registered->lease_id()).code(), absl::StatusCode::kNotFound);
  clock_.Advance(300ms);
  EXPECT_EQ(registry_->Query("a")->ms_since_heartbeat(), 300u);
}

TEST_F(InstanceRegistryTest, ASilentInstanceIsDroppedWithItsChunks) {
  const uint64_t lease = registry_->Register(Registration("a"))->lease_id();
  ASSERT_TRUE(registry_->Register(Registration("b")).ok());
  clock_.Advance(600ms);
  ASSERT_TRUE(registry_->Heartbeat("b", registry_->Query("b")->lease_id()).ok());
  clock_.Advance(500ms);
  EXPECT_EQ(registry_->ExpireSilent(), std::vector<std::string>{"a"});
  EXPECT_EQ(registry_->Query("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->Heartbeat("a", lease).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(index_->stats().instances, 1u);
  ASSERT_EQ(registry_->List().size(), 1u);
  EXPECT_EQ(registry_->List()[0].instance_id(), "b");
}

TEST_F(InstanceRegistryTest, RegisteringAgainReplacesTheLeaseAndTheFeed) {
  const uint64_t first = registry_->Register(Registration("a"))->lease_id();
  // The same daemon, restarted: the same endpoints.
  absl::StatusOr<v1::RegisterInstanceResponse> second = registry_->Register(Registration("a"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->lease_id(), first);
  EXPECT_EQ(feeds_started_, 2);
  EXPECT_EQ(index_->stats().instances, 1u) << "the old feed left before the new one came";
  EXPECT_EQ(registry_->Heartbeat("a", first).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->Deregister("a", first).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry_->Deregister("a", second->lease_id()).ok());
  EXPECT_EQ(registry_->size(), 0u);
  EXPECT_EQ(index_->stats().instances, 0u);
}

TEST_F(InstanceRegistryTest, TwoDaemonsCannotHoldOneIdWhileTheFirstLives) {
  const uint64_t lease = registry_->Register(Registration("a"))->lease_id();
  v1::RegisterInstanceRequest other_peer = Registration("a");
  other_peer.set_peer_address("10.0.0.2:7000");
  for (const v1::RegisterInstanceRequest& claim : {Registration("a", "127.0.0.1:2"), other_peer}) {
    absl::StatusOr<v1::RegisterInstanceResponse> refused = registry_->Register(claim);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists) << refused.status();
    EXPECT_NE(refused.status().message().find("127.0.0.1:1"), std::string::npos)
        << "the error names the holder: " << refused.status();
  }
  EXPECT_EQ(feeds_started_, 1);
  EXPECT_TRUE(registry_->Heartbeat("a", lease).ok()) << "the holder keeps its registration";
  // Silent for the timeout, the holder gives the id up to the next daemon that claims it.
  clock_.Advance(1000ms);
  absl::StatusOr<v1::RegisterInstanceResponse> taken =
      registry_->Register(Registration("a", "127.0.0.1:2"));
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(registry_->Query("a")->control_endpoint(), "127.0.0.1:2");
  EXPECT_EQ(registry_->Heartbeat("a", lease).code(), absl::StatusCode::kNotFound);
}

TEST_F(InstanceRegistryTest, TheMembershipListsThePeersAndChangesItsDigestWithThem) {
  const uint64_t empty = registry_->Membership()->digest();
  EXPECT_NE(empty, 0u);
  EXPECT_EQ(registry_->Membership()->members_size(), 0);
  v1::RegisterInstanceRequest b = Registration("b", "127.0.0.1:2");
  b.set_peer_address("10.0.0.2:7000");
  v1::RegisterInstanceRequest no_peer = Registration("c", "127.0.0.1:3");
  no_peer.clear_peer_address();
  absl::StatusOr<v1::RegisterInstanceResponse> first = registry_->Register(b);
  ASSERT_TRUE(first.ok());
  // A member that serves no peers is not a peer member.
  absl::StatusOr<v1::RegisterInstanceResponse> c = registry_->Register(no_peer);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(registry_->Membership()->digest(), first->membership().digest());
  ASSERT_TRUE(registry_->Deregister("c", c->lease_id()).ok());
  const uint64_t lease_a = registry_->Register(Registration("a"))->lease_id();
  std::shared_ptr<const v1::Membership> both = registry_->Membership();
  ASSERT_EQ(both->members_size(), 2);
  EXPECT_EQ(both->members(0).instance_id(), "a");
  EXPECT_EQ(both->members(0).peer_address(), "10.0.0.1:7000");
  EXPECT_EQ(both->members(1).instance_id(), "b");
  EXPECT_EQ(both->members(1).peer_address(), "10.0.0.2:7000");
  // The registration's answer carries the membership as it was then (b alone).
  ASSERT_EQ(first->membership().members_size(), 1);
  EXPECT_NE(first->membership().digest(), both->digest());
  // A departure changes it; the same members give the same digest in another registry (the
  // digest names the list, not the controller).
  ASSERT_TRUE(registry_->Deregister("a", lease_a).ok());
  EXPECT_EQ(registry_->Membership()->digest(), first->membership().digest());
  std::unique_ptr<InstanceRegistry> other = MakeRegistry(nullptr);
  EXPECT_EQ(other->Membership()->digest(), empty);
}

TEST_F(InstanceRegistryTest, BadRegistrationsAreRefusedAndNothingIsStarted) {
  const std::vector<v1::RegisterInstanceRequest> bad = {
      Registration(""),
      Registration(std::string(kMaxInstanceIdBytes + 1, 'x')),
      Registration("tab\there"),
      Registration("a", ""),
      Registration("a", "no-port"),
      Registration("a", ":50051"),
      Registration("a", "host:0"),
      Registration("a", "host:65536"),
      Registration("a", "host:5x"),
      Registration("a", "unix:"),
  };
  for (const v1::RegisterInstanceRequest& r : bad) {
    EXPECT_EQ(registry_->Register(r).status().code(), absl::StatusCode::kInvalidArgument)
        << r.ShortDebugString();
  }
  v1::RegisterInstanceRequest long_engine = Registration("a");
  long_engine.set_engine_endpoint(std::string(kMaxEndpointBytes + 1, 'e'));
  EXPECT_EQ(registry_->Register(long_engine).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(feeds_started_, 0);
  EXPECT_EQ(registry_->size(), 0u);

  EXPECT_TRUE(registry_->Register(Registration("unix-daemon", "unix:/run/strata/c.sock")).ok());
}

TEST_F(InstanceRegistryTest, AFullIndexRefusesTheRegistration) {
  ASSERT_TRUE(registry_->Register(Registration("a")).ok());
  ASSERT_TRUE(registry_->Register(Registration("b")).ok());
  EXPECT_EQ(registry_->Register(Registration("c")).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(registry_->size(), 2u);
}

TEST(InstanceRegistryOptionsTest, TheHeartbeatMustComeBeforeTheTimeout) {
  const FeedStarter none = [](const v1::RegisterInstanceRequest&) {
    return absl::StatusOr<std::unique_ptr<DaemonFeed>>(absl::InternalError("unused"));
  };
  EXPECT_FALSE(InstanceRegistry::Create(
                   {.start_feed = none, .instance_timeout = 1000ms, .heartbeat_interval = 1000ms})
                   .ok());
  EXPECT_FALSE(InstanceRegistry::Create({.instance_timeout = 1000ms}).ok());
  EXPECT_TRUE(InstanceRegistry::Create({.start_feed = none}).ok());
}

}  // namespace
}  // namespace strata::controller

#include "storage/remote/data_path.h"

#include <gtest/gtest.h>

namespace strata::storage::remote {
namespace {

TEST(ParseAllowedTransportsTest, DefaultAllowsSharedMemoryButClaimsNoRdma) {
  const AllowedTransports allowed = ParseAllowedTransports("");
  EXPECT_TRUE(allowed.shared_memory);
  EXPECT_FALSE(allowed.rdma);
}

TEST(ParseAllowedTransportsTest, ListsNameWhatTheyAllow) {
  EXPECT_FALSE(ParseAllowedTransports("tcp").shared_memory);
  EXPECT_FALSE(ParseAllowedTransports("tcp").rdma);
  EXPECT_TRUE(ParseAllowedTransports("posix,cma,tcp").shared_memory);
  EXPECT_TRUE(ParseAllowedTransports("tcp,\\sysv").shared_memory);
  EXPECT_TRUE(ParseAllowedTransports("rc,tcp").rdma);
  EXPECT_FALSE(ParseAllowedTransports("rc,tcp").shared_memory);
  EXPECT_TRUE(ParseAllowedTransports("all").shared_memory);
}

TEST(ParseAllowedTransportsTest, ExclusionsTurnSharedMemoryOffOnlyWhenAllOfItGoes) {
  EXPECT_TRUE(ParseAllowedTransports("^cma").shared_memory);
  EXPECT_FALSE(ParseAllowedTransports("^sm").shared_memory);
  EXPECT_FALSE(ParseAllowedTransports("^ib,shm").shared_memory);
  EXPECT_FALSE(ParseAllowedTransports("^cma").rdma);
}

TEST(ChooseDataPathTest, ConfiguredPathWins) {
  const AllowedTransports tcp_only = ParseAllowedTransports("tcp");
  EXPECT_EQ(ChooseDataPath(DataPath::kRma, tcp_only, false), DataPath::kRma);
  EXPECT_EQ(ChooseDataPath(DataPath::kActiveMessages, {.shared_memory = true}, true),
            DataPath::kActiveMessages);
}

TEST(ChooseDataPathTest, AutoTakesRmaOnlyOverRdma) {
  EXPECT_EQ(ChooseDataPath(DataPath::kAuto, ParseAllowedTransports("tcp"), true),
            DataPath::kActiveMessages);
  // Same host over shared memory: endpoints with peer-failure detection lose posix RMA.
  EXPECT_EQ(ChooseDataPath(DataPath::kAuto, ParseAllowedTransports(""), true),
            DataPath::kActiveMessages);
  EXPECT_EQ(ChooseDataPath(DataPath::kAuto, ParseAllowedTransports(""), false),
            DataPath::kActiveMessages);
  EXPECT_EQ(ChooseDataPath(DataPath::kAuto, ParseAllowedTransports("rc,tcp"), false),
            DataPath::kRma);
}

TEST(DataPathNameTest, NamesEveryPath) {
  EXPECT_EQ(DataPathName(DataPath::kAuto), "auto");
  EXPECT_EQ(DataPathName(DataPath::kRma), "rma");
  EXPECT_EQ(DataPathName(DataPath::kActiveMessages), "am");
}

}  // namespace
}  // namespace strata::storage::remote

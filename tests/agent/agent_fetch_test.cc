// Copyright 2026 The Strata Authors.
//
// Fetching a copy for a restore from a real `strata agent` process into
// another node's store (FetchCopy): over several connections, a Strata
// checkpoint's manifest first and every range verified as it arrives, a
// corrupt copy refused at its first bad range, another copy than the one
// planned refused before any data moves, and a holder refusing malformed
// fetches.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "agent/rpc/client.h"
#include "agent/rpc/step_stream.h"
#include "agent/rpc/transfer.h"
#include "agent/store/step_seal.h"
#include "agent/store/store.h"
#include "agent_peer.h"
#include "cluster.h"
#include "component_util.h"
#include "format/manifest.h"
#include "format/naming.h"
#include "format/step_index.h"
#include "net/frame.h"
#include "strata/checkpointer.h"
#include "test_util.h"
#include "util/hash.h"
#include "util/thread_pool.h"

namespace strata::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// Puts the step directory `dir` (indexed as the agent indexes it) as key
// j/0/`step` over one stream.
void PutDir(const Cluster& c, int64_t step, const std::string& dir, StepIndex* index) {
  ThreadPool pool(1);
  auto built = agent::BuildStepIndex(Env::Default(), dir, &pool);
  ASSERT_TRUE(built.ok()) << built.status().message();
  *index = *built;
  auto client = PeerConnect(c);
  ASSERT_TRUE(client.ok()) << client.status().message();
  auto ready = client->Call(PutStep(Key("j", 0, step), StepIndexToJson(*index)), 10s);
  ASSERT_TRUE(ready.ok()) << ready.status().message();
  ASSERT_TRUE(agent::SendStepFiles(client->socket(), dir, *index).ok());
  auto ack = net::RecvFrame(client->socket(), 1 << 20, net::DeadlineAfter(20s));
  ASSERT_TRUE(ack.ok()) << ack.status().message();
  ASSERT_EQ(json::parse(ack->payload, nullptr, false).value("committed", false), true)
      << ack->payload;
}

// Puts a step of `files` (path -> bytes) as key j/0/`step` over one stream.
void PutFiles(const Cluster& c, int64_t step, const std::map<std::string, std::string>& files,
              StepIndex* index) {
  ScratchDir dir("put-files");
  for (const auto& [path, data] : files) {
    std::filesystem::create_directories(std::filesystem::path(dir.Sub(path)).parent_path());
    WriteFile(dir.Sub(path), data);
  }
  PutDir(c, step, dir.path(), index);
}

// A Strata checkpoint of 24 MiB in two data files, as step 1 of `dir`;
// returns its step directory ("" on failure).
std::string WriteStrataStep(const std::string& dir) {
  const std::string bytes = RandomBytes(24 << 20, 31);
  std::vector<Item> items = {{"x", DType::kBytes, {16 << 20}, bytes.data(), 16 << 20},
                             {"y", DType::kBytes, {8 << 20}, bytes.data() + (16 << 20), 8 << 20}};
  CheckpointerOptions o;
  o.async = false;
  o.preemption_signals = {};
  o.io_threads = 2;
  auto ckpt = Checkpointer::Open(dir, o);
  if (!ckpt.ok() || !(*ckpt)->Save(1, items).ok()) return "";
  return dir + "/" + StepDirName(1);
}

// Writes a Strata checkpoint in `src` and puts it as key j/0/`step`; *dir
// is its step directory.
void PutStrataStep(const Cluster& c, int64_t step, const ScratchDir& src, std::string* dir,
                   StepIndex* index) {
  *dir = WriteStrataStep(src.path());
  ASSERT_FALSE(dir->empty());
  ASSERT_NO_FATAL_FAILURE(PutDir(c, step, *dir, index));
  ASSERT_TRUE(index->strata);
}

// One agent holding the copies, and the store of the node that fetches them.
class AgentFetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c_.StartAgent(0);
    ServeJob(c_, "j", 1, 2);  // the agent takes j/0/N as a peer's steps
    auto store = agent::Store::Open(node_.path(), &pool_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(*store);
  }
  // FetchCopy of `key` from the agent over up to 3 connections.
  StatusOr<agent::FetchedCopy> Fetch(const wire::StepKey& key,
                                     std::optional<uint64_t> digest = std::nullopt) {
    return agent::FetchCopy(AgentEndpoint(c_), testing::PskTrust(c_.secret()), "node 1", key, 3,
                            store_.get(), digest);
  }

  Cluster c_{1, "fetch"};
  ScratchDir node_{"fetching"};
  ThreadPool pool_{2};
  std::unique_ptr<agent::Store> store_;
};

// A restore fetches a large step over several connections, one file group
// each (get_index, then fetch_step with "files"), into another node's store.
TEST_F(AgentFetchTest, MultiStreamFetchRestoresEveryFile) {
  const std::map<std::string, std::string> files = {{"a.bin", RandomBytes(9 << 20, 21)},
                                                    {"b/c.bin", RandomBytes(7 << 20, 22)},
                                                    {"d.bin", RandomBytes(3 << 20, 23)},
                                                    {"empty", ""}};
  StepIndex index;
  ASSERT_NO_FATAL_FAILURE(PutFiles(c_, 7, files, &index));
  const wire::StepKey key{"j", 0, 7};
  auto copy = Fetch(key);
  ASSERT_TRUE(copy.ok()) << copy.status().message();
  EXPECT_EQ(copy->index.digest, index.digest);
  Status adopted = store_->Adopt(copy->dir, key, copy->index);
  ASSERT_TRUE(adopted.ok()) << adopted.message();
  for (const auto& [path, data] : files) {
    EXPECT_EQ(ReadFile(store_->StepPath(key) + "/" + path), data) << path;
  }
  // Three groups, three connections: the agent served the step three times.
  ASSERT_TRUE(WaitUntil([&] { return Count(c_.AgentLog(0), "served j/0/7") == 3; }))
      << c_.AgentLog(0);
}

// A Strata copy is fetched manifest first, then its data files in groups,
// each chunk checked against the manifest as it arrives: committing it
// needs no second pass over the data.
TEST_F(AgentFetchTest, StrataCopyIsVerifiedAsItArrives) {
  ScratchDir src("strata-src");
  std::string step;
  StepIndex index;
  ASSERT_NO_FATAL_FAILURE(PutStrataStep(c_, 11, src, &step, &index));
  const wire::StepKey key{"j", 0, 11};
  // Another copy than a restore plan chose: refused before any data moves.
  auto other = Fetch(key, index.digest ^ 1);
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("another copy"), std::string::npos)
      << other.status().message();
  EXPECT_EQ(EntriesIn(store_->root() + "/incoming"), 0u);
  auto copy = Fetch(key, index.digest);
  ASSERT_TRUE(copy.ok()) << copy.status().message();
  EXPECT_TRUE(copy->data_verified);
  Status adopted = agent::AdoptCopy(store_.get(), key, *copy);
  ASSERT_TRUE(adopted.ok()) << adopted.message();
  EXPECT_TRUE(store_->Verify(key).ok());
  for (const auto& f : index.files) {
    EXPECT_EQ(ReadFile(store_->StepPath(key) + "/" + f.path), ReadFile(step + "/" + f.path))
        << f.path;
  }
  // The manifest on one connection, then one per data file.
  const size_t data_files = index.files.size() - 1;
  ASSERT_GE(data_files, 1u);
  ASSERT_TRUE(WaitUntil([&] { return Count(c_.AgentLog(0), "served j/0/11") == 1 + data_files; }))
      << c_.AgentLog(0);
}

// A holder whose copy is corrupt sends it as it is; the fetch fails on the
// first bad range with DATA_LOSS naming the file and the range, is not
// retried on that holder, and leaves nothing behind.
TEST_F(AgentFetchTest, CorruptCopyIsRefusedAsItArrives) {
  ScratchDir src("strata-corrupt");
  std::string step;
  StepIndex strata;
  ASSERT_NO_FATAL_FAILURE(PutStrataStep(c_, 12, src, &step, &strata));
  StepIndex other;
  ASSERT_NO_FATAL_FAILURE(PutFiles(c_, 13, {{"a.bin", RandomBytes(20 << 20, 32)}}, &other));
  const std::string held = c_.dir(0) + "/.strata-agent/steps/j/0/";
  const std::string strata_data = strata.files.front().path;  // sorts before strata.manifest
  ASSERT_NE(strata_data, "strata.manifest");
  FlipByte(held + "12/" + strata_data, 5 << 20);
  FlipByte(held + "13/a.bin", 17 << 20);
  // Which item chunk of the Strata step holds the flipped byte.
  auto manifest = DecodeManifest(ReadFile(step + "/strata.manifest"), "manifest");
  ASSERT_TRUE(manifest.ok()) << manifest.status().message();
  std::string strata_range;
  for (const ItemInfo& item : manifest->items) {
    const uint64_t at = 5 << 20;
    if (manifest->files[item.file].name == strata_data && item.offset <= at &&
        at < item.offset + item.nbytes) {
      const uint64_t chunk = (at - item.offset) / manifest->chunk_size;
      strata_range = "(item '" + item.name + "' chunk " + std::to_string(chunk) + ")";
    }
  }
  ASSERT_FALSE(strata_range.empty());
  for (const auto& [step_number, file, range] :
       {std::tuple<int64_t, std::string, std::string>{12, strata_data, strata_range},
        {13, "a.bin", "bytes [16777216, 20971520) (chunk 1)"}}) {
    const wire::StepKey key{"j", 0, step_number};
    const std::string served = "served " + key.ToString();
    const size_t before = Count(c_.AgentLog(0), served);
    auto copy = Fetch(key);
    ASSERT_EQ(copy.status().code(), StatusCode::kDataLoss) << key.ToString();
    const std::string& m = copy.status().message();
    EXPECT_NE(m.find(file), std::string::npos) << m;
    EXPECT_NE(m.find(range), std::string::npos) << m;
    EXPECT_NE(m.find("checksum mismatch"), std::string::npos) << m;
    EXPECT_EQ(EntriesIn(store_->root() + "/incoming"), 0u);
    EXPECT_FALSE(store_->Has(key));
    // No second attempt over one connection: at most one serve per group.
    std::this_thread::sleep_for(200ms);
    EXPECT_LE(Count(c_.AgentLog(0), served) - before, 3u) << c_.AgentLog(0);
  }
}

// The first bad range ends the transfer: the streams are shut down, so the
// holder never finishes sending a copy far larger than the sockets buffer.
TEST_F(AgentFetchTest, FirstBadRangeStopsTheTransfer) {
  StepIndex index;
  ASSERT_NO_FATAL_FAILURE(PutFiles(c_, 14, {{"big.bin", RandomBytes(96 << 20, 33)}}, &index));
  FlipByte(c_.dir(0) + "/.strata-agent/steps/j/0/14/big.bin", 1 << 20);
  const wire::StepKey key{"j", 0, 14};
  auto copy = Fetch(key);
  ASSERT_EQ(copy.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(copy.status().message().find("big.bin bytes [0, 16777216) (chunk 0)"),
            std::string::npos)
      << copy.status().message();
  // The agent's send is cut short instead of serving all 96 MiB.
  EXPECT_TRUE(WaitUntil([&] {
    return Count(c_.AgentLog(0), "big.bin to ") > 0 &&
           Count(c_.AgentLog(0), " of 100663296 bytes") > 0;
  })) << c_.AgentLog(0);
  EXPECT_EQ(Count(c_.AgentLog(0), "served j/0/14"), 0u) << c_.AgentLog(0);
}

// A group asked of another copy than the index described, or of files the
// copy does not have, is refused with the step named; nothing is sent and
// the connection stays usable.
TEST_F(AgentFetchTest, FetchOfAnotherCopyOrFileIsRefused) {
  StepIndex index;
  ASSERT_NO_FATAL_FAILURE(PutFiles(c_, 8, {{"a.bin", RandomBytes(4096, 24)}}, &index));
  auto client = PeerConnect(c_);
  ASSERT_TRUE(client.ok()) << client.status().message();
  json fetch = {{"op", "fetch_step"}, {"key", Key("j", 0, 8)}, {"files", {0}}};
  fetch["digest"] = Hex64(index.digest + 1);
  auto wrong = client->Call(fetch, 10s);
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("another copy of j/0/8"), std::string::npos)
      << wrong.status().message();
  fetch["digest"] = Hex64(index.digest);
  // Past the end, repeated (a file sent twice), negative, not numbers, not a list.
  for (const json& files : {json{1}, json{0, 0}, json{-1}, json{"0"}, json{0.5}, json(0)}) {
    fetch["files"] = files;
    EXPECT_EQ(client->Call(fetch, 10s).status().code(), StatusCode::kInvalidArgument) << files;
  }
  auto got = client->Call({{"op", "get_index"}, {"key", Key("j", 0, 8)}}, 10s);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->at("index").value("digest", ""), Hex64(index.digest));
  auto none = client->Call({{"op", "get_index"}, {"key", Key("j", 0, 9)}}, 10s);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace strata::testing

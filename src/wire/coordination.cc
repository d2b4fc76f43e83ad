// Copyright 2026 The Strata Authors.
#include "wire/coordination.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "format/naming.h"
#include "util/hash.h"
#include "wire/op.h"

namespace strata::wire {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr size_t kMaxTextBytes = 4096;
constexpr size_t kMaxListEntries = 1 << 20;

// Reads the fields of one request, naming the call in every error.
class Reader {
 public:
  Reader(const json& j, Op op) : j_(j), op_(OpName(op)) {}

  Status CheckObject() const {
    if (j_.is_object()) return Status::Ok();
    return InvalidArgumentError(std::string(op_) + ": the request is not an object");
  }

  const json* Find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  Status Error(const char* key, const std::string& want) const {
    return InvalidArgumentError(std::string(op_) + ": \"" + key + "\" must be " + want);
  }

  StatusOr<std::optional<int64_t>> OptInt(const char* key, int64_t lo, int64_t hi) const {
    const json* v = Find(key);
    if (v == nullptr) return std::optional<int64_t>();
    const std::string want =
        "an integer in " + std::to_string(lo) + ".." + (hi == kInt64Max ? "" : std::to_string(hi));
    if (!v->is_number_integer()) return Error(key, want);
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(kInt64Max)) {
      return Error(key, want);
    }
    const int64_t n = v->get<int64_t>();
    if (n < lo || n > hi) return Error(key, want);
    return std::optional<int64_t>(n);
  }

  StatusOr<int64_t> Int(const char* key, int64_t lo, int64_t hi) const {
    STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> n, OptInt(key, lo, hi));
    if (!n) return InvalidArgumentError(std::string(op_) + ": \"" + key + "\" is missing");
    return *n;
  }

  StatusOr<int64_t> IntOr(const char* key, int64_t lo, int64_t hi, int64_t fallback) const {
    STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> n, OptInt(key, lo, hi));
    return n.value_or(fallback);
  }

  // A non-negative integer (0 when absent); built in C++ it may be a signed
  // JSON number, parsed from text it is unsigned.
  StatusOr<uint64_t> Unsigned(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr) return uint64_t{0};
    if (!IsNonNegativeInteger(*v)) {
      return Error(key, "a non-negative integer");
    }
    return v->get<uint64_t>();
  }

  StatusOr<std::optional<std::string>> OptText(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string() || v->get_ref<const std::string&>().size() > kMaxTextBytes) {
      return Error(key, "a string of at most " + std::to_string(kMaxTextBytes) + " bytes");
    }
    return std::optional<std::string>(v->get<std::string>());
  }

  StatusOr<std::string> TextOr(const char* key, std::string fallback) const {
    STRATA_ASSIGN_OR_RETURN(std::optional<std::string> t, OptText(key));
    return t.value_or(std::move(fallback));
  }

  StatusOr<bool> Bool(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) return Error(key, "true or false");
    return v->get<bool>();
  }

  StatusOr<double> Number(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr) return 0.0;
    if (!v->is_number()) return Error(key, "a number");
    return v->get<double>();
  }

  StatusOr<std::string> Job() const {
    STRATA_ASSIGN_OR_RETURN(std::optional<std::string> job, OptText("job"));
    if (!job) return InvalidArgumentError(std::string(op_) + ": \"job\" is missing");
    Status valid = ValidateJobName(*job);
    if (!valid.ok()) return InvalidArgumentError(std::string(op_) + ": " + valid.message());
    return *job;
  }

  // A node rank (the job's node count bounds it later).
  StatusOr<int> Node(const char* key = "node") const {
    STRATA_ASSIGN_OR_RETURN(int64_t n, Int(key, 0, kMaxNodes - 1));
    return static_cast<int>(n);
  }

  StatusOr<std::optional<std::chrono::milliseconds>> Wait() const {
    if (Find("wait_ms") == nullptr) return std::optional<std::chrono::milliseconds>();
    STRATA_ASSIGN_OR_RETURN(uint64_t asked, Unsigned("wait_ms"));
    const uint64_t ms = std::min<uint64_t>(asked, 24ull * 3600 * 1000);
    return std::optional<std::chrono::milliseconds>(std::chrono::milliseconds(ms));
  }

  StatusOr<const json*> List(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr) return v;
    if (!v->is_array() || v->size() > kMaxListEntries) return Error(key, "a list");
    return v;
  }

  StatusOr<std::vector<HeldCopy>> Copies(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(const json* list, List(key));
    std::vector<HeldCopy> out;
    if (list == nullptr) return out;
    const std::string want = "a list of [rank, step, \"digest\"]";
    for (const json& c : *list) {
      if (!c.is_array() || c.size() != 3 || !c[0].is_number_integer() ||
          !c[1].is_number_integer() || !c[2].is_string()) {
        return Error(key, want);
      }
      const int64_t rank = c[0].get<int64_t>(), step = c[1].get<int64_t>();
      auto digest = ParseHex64(c[2].get<std::string>());
      if (rank < 0 || rank >= kMaxNodes || step < 0 || !digest) return Error(key, want);
      out.push_back({static_cast<int>(rank), step, *digest});
    }
    return out;
  }

  StatusOr<std::vector<FailedHolder>> Failed(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(const json* list, List(key));
    std::vector<FailedHolder> out;
    if (list == nullptr) return out;
    const std::string want = "a list of [holder, rank, step]";
    for (const json& b : *list) {
      if (!b.is_array() || b.size() != 3 || !b[0].is_number_integer() ||
          !b[1].is_number_integer() || !b[2].is_number_integer()) {
        return Error(key, want);
      }
      const int64_t holder = b[0].get<int64_t>(), rank = b[1].get<int64_t>();
      if (holder < std::numeric_limits<int>::min() || holder >= kMaxNodes || rank < kParityRank ||
          rank >= kMaxNodes) {
        return Error(key, want);
      }
      out.push_back({static_cast<int>(holder), static_cast<int>(rank), b[2].get<int64_t>()});
    }
    return out;
  }

  StatusOr<std::vector<int>> Ranks(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(const json* list, List(key));
    std::vector<int> out;
    if (list == nullptr) return out;
    for (const json& n : *list) {
      if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() >= kMaxNodes) {
        return Error(key, "a list of node ranks");
      }
      out.push_back(n.get<int>());
    }
    return out;
  }

  // Cadence fields are advisory: a value that is not a positive integer is
  // ignored, as it always was.
  Cadence ReadCadence() const {
    auto positive = [this](const char* key) -> std::optional<int> {
      const json* v = Find(key);
      if (v == nullptr || !v->is_number_integer() || v->get<int64_t>() < 1) return std::nullopt;
      return static_cast<int>(std::min<int64_t>(v->get<int64_t>(), INT32_MAX));
    };
    return Cadence{positive("backup_interval_steps"), positive("backup_interval_minutes"),
                   positive("workers_per_node")};
  }

 private:
  const json& j_;
  const char* op_;
};

json CopiesJson(const std::vector<HeldCopy>& copies) {
  json out = json::array();
  for (const HeldCopy& c : copies) out.push_back({c.rank, c.step, Hex64(c.digest)});
  return out;
}

void PutCadence(const Cadence& c, json* j) {
  if (c.backup_interval_steps) (*j)["backup_interval_steps"] = *c.backup_interval_steps;
  if (c.backup_interval_minutes) (*j)["backup_interval_minutes"] = *c.backup_interval_minutes;
  if (c.workers_per_node) (*j)["workers_per_node"] = *c.workers_per_node;
}

void PutWait(const std::optional<std::chrono::milliseconds>& wait, json* j) {
  if (wait) (*j)["wait_ms"] = wait->count();
}

}  // namespace

StatusOr<RegisterRequest> RegisterRequest::FromJson(const json& j) {
  Reader in(j, Op::kRegister);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  RegisterRequest r;
  STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  STRATA_ASSIGN_OR_RETURN(int64_t nodes, in.Int("nodes", 1, kMaxNodes));
  r.nodes = static_cast<int>(nodes);
  STRATA_ASSIGN_OR_RETURN(int64_t node, in.Int("node", 0, nodes - 1));
  r.node = static_cast<int>(node);
  STRATA_ASSIGN_OR_RETURN(int64_t dp, in.Int("dp", 1, nodes));
  r.dp = static_cast<int>(dp);
  STRATA_ASSIGN_OR_RETURN(std::string address, in.TextOr("address", ""));
  auto endpoint = net::ParseEndpoint(address);
  if (!endpoint.ok()) {
    return InvalidArgumentError(std::string(OpName(Op::kRegister)) +
                                ": \"address\": " + endpoint.status().message());
  }
  r.address = *endpoint;
  STRATA_ASSIGN_OR_RETURN(r.incarnation, in.TextOr("incarnation", ""));
  STRATA_ASSIGN_OR_RETURN(r.inventory, in.Copies("inventory"));
  r.cadence = in.ReadCadence();
  STRATA_ASSIGN_OR_RETURN(std::string redundancy, in.TextOr("redundancy", "copies"));
  StatusOr<ec::Redundancy> parsed = ec::Redundancy::Parse(redundancy);
  if (!parsed.ok()) {
    return InvalidArgumentError(std::string(OpName(Op::kRegister)) + ": " +
                                parsed.status().message());
  }
  r.redundancy = *parsed;
  STRATA_ASSIGN_OR_RETURN(r.domain, in.TextOr("domain", ""));
  if (r.domain.size() > 64) return in.Error("domain", "at most 64 bytes");
  if (const json* parity = in.Find("parity")) {
    STRATA_ASSIGN_OR_RETURN(r.parity, HeldParityFromJson(*parity, OpName(Op::kRegister)));
  }
  return r;
}

json RegisterRequest::ToJson() const {
  json j = {{"op", OpName(Op::kRegister)},
            {"job", job},
            {"node", node},
            {"nodes", nodes},
            {"dp", dp},
            {"address", address.ToString()},
            {"inventory", CopiesJson(inventory)}};
  if (!incarnation.empty()) j["incarnation"] = incarnation;
  PutCadence(cadence, &j);
  if (redundancy.coded()) j["redundancy"] = redundancy.ToString();
  if (!domain.empty()) j["domain"] = domain;
  if (!parity.empty()) j["parity"] = HeldParityToJson(parity);
  return j;
}

StatusOr<AwaitPlanRequest> AwaitPlanRequest::FromJson(const json& j) {
  Reader in(j, Op::kAwaitPlan);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  AwaitPlanRequest r;
  STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  STRATA_ASSIGN_OR_RETURN(r.round, in.Int("round", 0, kInt64Max));
  STRATA_ASSIGN_OR_RETURN(r.plan_version, in.IntOr("plan_version", 0, kInt64Max, 0));
  STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> node, in.OptInt("node", -1, kMaxNodes - 1));
  if (node && *node >= 0) r.node = static_cast<int>(*node);  // -1: the whole plan
  STRATA_ASSIGN_OR_RETURN(r.peers, in.Ranks("peers"));
  STRATA_ASSIGN_OR_RETURN(r.wait, in.Wait());
  return r;
}

json AwaitPlanRequest::ToJson() const {
  json j = {{"op", OpName(Op::kAwaitPlan)},
            {"job", job},
            {"round", round},
            {"plan_version", plan_version}};
  if (node) {
    j["node"] = *node;
    j["peers"] = peers;
  }
  PutWait(wait, &j);
  return j;
}

StatusOr<ReadyRequest> ReadyRequest::FromJson(const json& j) {
  Reader in(j, Op::kReady);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  ReadyRequest r;
  STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  STRATA_ASSIGN_OR_RETURN(r.round, in.Int("round", 0, kInt64Max));
  STRATA_ASSIGN_OR_RETURN(r.node, in.Node());
  STRATA_ASSIGN_OR_RETURN(r.plan_version, in.IntOr("plan_version", -1, kInt64Max, -1));
  STRATA_ASSIGN_OR_RETURN(r.ok, in.Bool("ok"));
  STRATA_ASSIGN_OR_RETURN(r.bad, in.Failed("bad"));
  STRATA_ASSIGN_OR_RETURN(r.wait, in.Wait());
  return r;
}

json ReadyRequest::ToJson() const {
  json failed = json::array();
  for (const FailedHolder& b : bad) failed.push_back({b.holder, b.rank, b.step});
  json j = {{"op", OpName(Op::kReady)},     {"job", job}, {"round", round},          {"node", node},
            {"plan_version", plan_version}, {"ok", ok},   {"bad", std::move(failed)}};
  PutWait(wait, &j);
  return j;
}

StatusOr<ReplicatedRequest> ReplicatedRequest::FromJson(const json& j) {
  Reader in(j, Op::kReplicated);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  ReplicatedRequest r;
  STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  STRATA_ASSIGN_OR_RETURN(r.node, in.Node());
  STRATA_ASSIGN_OR_RETURN(r.step, in.IntOr("step", -1, kInt64Max, -1));
  STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> nodes, in.OptInt("nodes", 1, kMaxNodes));
  if (nodes) {
    r.nodes = static_cast<int>(*nodes);
    STRATA_ASSIGN_OR_RETURN(int64_t dp, in.Int("dp", 1, *nodes));
    r.dp = static_cast<int>(dp);
  }
  r.cadence = in.ReadCadence();
  return r;
}

json ReplicatedRequest::ToJson() const {
  json j = {{"op", OpName(Op::kReplicated)}, {"job", job}, {"node", node}, {"step", step}};
  if (nodes) j["nodes"] = *nodes;
  if (dp) j["dp"] = *dp;
  PutCadence(cadence, &j);
  return j;
}

StatusOr<BackupDoneRequest> BackupDoneRequest::FromJson(const json& j) {
  Reader in(j, Op::kBackupDone);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  BackupDoneRequest r;
  STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  STRATA_ASSIGN_OR_RETURN(r.node, in.Node());
  STRATA_ASSIGN_OR_RETURN(r.id, in.TextOr("id", ""));
  STRATA_ASSIGN_OR_RETURN(r.part, in.Node("part"));
  STRATA_ASSIGN_OR_RETURN(r.step, in.IntOr("step", -1, kInt64Max, -1));
  STRATA_ASSIGN_OR_RETURN(r.ok, in.Bool("ok"));
  STRATA_ASSIGN_OR_RETURN(r.error, in.TextOr("error", "upload failed"));
  STRATA_ASSIGN_OR_RETURN(r.bytes, in.Unsigned("bytes"));
  STRATA_ASSIGN_OR_RETURN(std::optional<std::string> digest, in.OptText("digest"));
  if (digest && !digest->empty()) {
    r.digest = ParseHex64(*digest);
    if (!r.digest) return in.Error("digest", "16 hex digits");
  }
  return r;
}

json BackupDoneRequest::ToJson() const {
  json j = {{"op", OpName(Op::kBackupDone)},
            {"job", job},
            {"node", node},
            {"id", id},
            {"part", part},
            {"step", step},
            {"ok", ok},
            {"bytes", bytes}};
  if (digest) j["digest"] = Hex64(*digest);
  if (!ok) j["error"] = error;
  return j;
}

StatusOr<NodeAddressRequest> NodeAddressRequest::FromJson(const json& j) {
  Reader in(j, Op::kNodeAddress);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  NodeAddressRequest r;
  if (in.Find("job") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  }
  STRATA_ASSIGN_OR_RETURN(r.node, in.Node());
  return r;
}

json NodeAddressRequest::ToJson() const {
  json j = {{"op", OpName(Op::kNodeAddress)}, {"node", node}};
  if (job) j["job"] = *job;
  return j;
}

StatusOr<NoticeRequest> NoticeRequest::FromJson(const json& j) {
  Reader in(j, Op::kNotice);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  NoticeRequest r;
  STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  STRATA_ASSIGN_OR_RETURN(r.node, in.Node());
  STRATA_ASSIGN_OR_RETURN(r.step, in.IntOr("step", -1, kInt64Max, -1));
  STRATA_ASSIGN_OR_RETURN(r.origin, in.TextOr("origin", ""));
  return r;
}

json NoticeRequest::ToJson() const {
  return {{"op", OpName(Op::kNotice)},
          {"job", job},
          {"node", node},
          {"step", step},
          {"origin", origin}};
}

StatusOr<SyncRequest> SyncRequest::FromJson(const json& j) {
  Reader in(j, Op::kSync);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  SyncRequest r;
  STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  STRATA_ASSIGN_OR_RETURN(r.node, in.Node());
  STRATA_ASSIGN_OR_RETURN(r.step, in.IntOr("step", -1, kInt64Max, -1));
  STRATA_ASSIGN_OR_RETURN(r.rate, in.Number("rate"));
  STRATA_ASSIGN_OR_RETURN(r.generation, in.Unsigned("generation"));
  STRATA_ASSIGN_OR_RETURN(r.collect, in.Unsigned("collect"));
  STRATA_ASSIGN_OR_RETURN(r.wait, in.Wait());
  STRATA_ASSIGN_OR_RETURN(r.round, in.OptInt("round", 0, kInt64Max));
  return r;
}

json SyncRequest::ToJson() const {
  json j = {{"op", OpName(Op::kSync)},
            {"job", job},
            {"node", node},
            {"step", step},
            {"rate", rate},
            {"generation", generation},
            {"collect", collect}};
  PutWait(wait, &j);
  if (round) j["round"] = *round;
  return j;
}

StatusOr<QuarantineStepRequest> QuarantineStepRequest::FromJson(const json& j) {
  Reader in(j, Op::kQuarantineStep);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  QuarantineStepRequest r;
  STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  STRATA_ASSIGN_OR_RETURN(r.node, in.Node());
  STRATA_ASSIGN_OR_RETURN(r.step, in.Int("step", 0, kInt64Max));
  return r;
}

json QuarantineStepRequest::ToJson() const {
  return {{"op", OpName(Op::kQuarantineStep)}, {"job", job}, {"node", node}, {"step", step}};
}

StatusOr<AddCopiesRequest> AddCopiesRequest::FromJson(const json& j) {
  Reader in(j, Op::kAddCopies);
  STRATA_RETURN_IF_ERROR(in.CheckObject());
  AddCopiesRequest r;
  STRATA_ASSIGN_OR_RETURN(r.job, in.Job());
  STRATA_ASSIGN_OR_RETURN(r.round, in.Int("round", 0, kInt64Max));
  STRATA_ASSIGN_OR_RETURN(r.node, in.Node());
  STRATA_ASSIGN_OR_RETURN(r.inventory, in.Copies("inventory"));
  return r;
}

json AddCopiesRequest::ToJson() const {
  return {{"op", OpName(Op::kAddCopies)},
          {"job", job},
          {"round", round},
          {"node", node},
          {"inventory", CopiesJson(inventory)}};
}

StatusOr<ReplicatedReply> ReplicatedReply::FromJson(const json& j) {
  const std::string what = "the answer to a replication report";
  if (!j.is_object()) return InvalidArgumentError(what + " is not an object");
  auto malformed = [&what](const char* key) {
    return InvalidArgumentError(what + ": \"" + key + "\" is malformed");
  };
  ReplicatedReply r;
  auto watermark = j.find("watermark");
  if (watermark != j.end()) {
    if (!watermark->is_number_integer()) return malformed("watermark");
    r.watermark = watermark->get<int64_t>();
  }
  auto newest = j.find("newest_backup");
  if (newest != j.end() && !newest->is_null()) {
    const bool ok = newest->is_object() && newest->value("id", json()).is_string() &&
                    newest->value("step", json()).is_number_integer() &&
                    newest->value("created", json()).is_number_integer() &&
                    newest->value("committed", json()).is_number_integer();
    if (!ok) return malformed("newest_backup");
    r.newest_backup =
        Backup{(*newest)["id"].get<std::string>(), (*newest)["step"].get<int64_t>(),
               (*newest)["created"].get<int64_t>(), (*newest)["committed"].get<int64_t>()};
  }
  auto error = j.find("backup_error");
  if (error != j.end()) {
    if (!error->is_string()) return malformed("backup_error");
    r.backup_error = error->get<std::string>();
  }
  auto task = j.find("backup_task");
  if (task != j.end()) {
    const bool ok = task->is_object() && task->value("id", json()).is_string() &&
                    task->value("step", json()).is_number_integer() &&
                    task->value("part", json()).is_number_integer() &&
                    (*task)["part"].get<int64_t>() >= 0 &&
                    (*task)["part"].get<int64_t>() < kMaxNodes;
    if (!ok) return malformed("backup_task");
    r.backup_task = Task{(*task)["id"].get<std::string>(), (*task)["step"].get<int64_t>(),
                         (*task)["part"].get<int>()};
  }
  return r;
}

json ReplicatedReply::ToJson() const {
  json j = {{"watermark", watermark}};
  if (newest_backup) {
    j["newest_backup"] = {{"id", newest_backup->id},
                          {"step", newest_backup->step},
                          {"created", newest_backup->created},
                          {"committed", newest_backup->committed}};
  }
  if (!backup_error.empty()) j["backup_error"] = backup_error;
  if (backup_task) {
    j["backup_task"] = {
        {"id", backup_task->id}, {"step", backup_task->step}, {"part", backup_task->part}};
  }
  return j;
}

StatusOr<SyncDecision> SyncDecision::FromJson(const json& j) {
  const std::string what = "the on-demand step decision";
  if (!j.is_object()) return InvalidArgumentError(what + " is not an object");
  auto field = [&](const char* key) -> StatusOr<const json*> {
    auto it = j.find(key);
    if (it == j.end()) return InvalidArgumentError(what + ": \"" + key + "\" is missing");
    return &*it;
  };
  auto malformed = [&](const char* key) {
    return InvalidArgumentError(what + ": \"" + key + "\" is malformed");
  };
  SyncDecision d;
  STRATA_ASSIGN_OR_RETURN(const json* generation, field("generation"));
  STRATA_ASSIGN_OR_RETURN(const json* round, field("round"));
  STRATA_ASSIGN_OR_RETURN(const json* collect, field("collect"));
  STRATA_ASSIGN_OR_RETURN(const json* step, field("step"));
  if (!IsNonNegativeInteger(*generation)) return malformed("generation");
  if (!round->is_number_integer()) return malformed("round");
  if (!IsNonNegativeInteger(*collect)) return malformed("collect");
  d.generation = generation->get<uint64_t>();
  d.round = round->get<int64_t>();
  d.collect = collect->get<uint64_t>();
  auto collecting = j.find("collecting");
  if (collecting != j.end()) {
    if (!collecting->is_boolean()) return malformed("collecting");
    d.collecting = collecting->get<bool>();
  }
  if (!step->is_null()) {
    if (!step->is_number_integer()) return malformed("step");
    d.step = step->get<int64_t>();
    auto at = j.find("notice_unix_ms");
    if (at != j.end()) {
      if (!at->is_number_integer()) return malformed("notice_unix_ms");
      d.notice_unix_ms = at->get<int64_t>();
    }
    auto notice_step = j.find("notice_step");
    if (notice_step != j.end()) {
      if (!notice_step->is_number_integer()) return malformed("notice_step");
      d.notice_step = notice_step->get<int64_t>();
    }
    auto origin = j.find("origin");
    if (origin != j.end()) {
      if (!origin->is_string()) return malformed("origin");
      d.origin = origin->get<std::string>();
    }
  }
  return d;
}

json SyncDecision::ToJson() const {
  json j = {{"generation", generation},
            {"round", round},
            {"collect", collect},
            {"collecting", collecting},
            {"step", step ? json(*step) : json(nullptr)}};
  if (step) {
    j["notice_unix_ms"] = notice_unix_ms;
    if (notice_step) j["notice_step"] = *notice_step;
    j["origin"] = origin;
  }
  return j;
}

StatusOr<PlanReply> PlanReply::FromJson(const json& j) {
  const std::string what = "the plan";
  if (!j.is_object()) return InvalidArgumentError(what + " is not an object");
  auto bad = [&what](const char* field) {
    return InvalidArgumentError(what + ": \"" + field + "\" is malformed");
  };
  PlanReply p;
  auto integer = [&j](const char* key, int64_t* out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return false;
    *out = it->get<int64_t>();
    return true;
  };
  if (!integer("round", &p.round)) return bad("round");
  if (!integer("plan_version", &p.plan_version)) return bad("plan_version");
  auto step = j.find("step");
  if (step != j.end() && !step->is_null()) {
    if (!step->is_number_integer() || step->get<int64_t>() < 0) return bad("step");
    p.step = step->get<int64_t>();
  }
  auto rank_of = [](const std::string& key) -> std::optional<int> {
    int n = 0;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), n);
    if (ec != std::errc() || end != key.data() + key.size() || n < 0 || n >= kMaxNodes) {
      return std::nullopt;
    }
    return n;
  };
  auto sources = j.find("sources");
  if (sources != j.end()) {
    if (!sources->is_object()) return bad("sources");
    for (const auto& [key, src] : sources->items()) {
      std::optional<int> rank = rank_of(key);
      // Ranks are checked against their range before they become ints
      // (get<int> of 2^40 would silently truncate).
      auto is_rank = [](const json& v, int64_t lo) {
        return v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() < kMaxNodes;
      };
      if (!rank || !src.is_object() || !is_rank(src.value("source_rank", json()), 0) ||
          !src.value("holders", json()).is_array() || !src.value("digest", json()).is_string()) {
        return bad("sources");
      }
      Source s;
      s.source_rank = src["source_rank"].get<int>();
      for (const json& h : src["holders"]) {
        if (!is_rank(h, kBackupHolder)) return bad("sources");
        s.holders.push_back(h.get<int>());
      }
      std::optional<uint64_t> digest = ParseHex64(src["digest"].get<std::string>());
      if (!digest) return bad("sources");
      s.digest = *digest;
      if (src.contains("decode")) {
        STRATA_ASSIGN_OR_RETURN(s.decode, DecodeFromJson(src["decode"], what));
      }
      p.sources[*rank] = std::move(s);
    }
  }
  auto addresses = j.find("addresses");
  if (addresses != j.end()) {
    if (!addresses->is_object()) return bad("addresses");
    for (const auto& [key, address] : addresses->items()) {
      std::optional<int> rank = rank_of(key);
      if (!rank || !address.is_string()) return bad("addresses");
      p.addresses[*rank] = address.get<std::string>();
    }
  }
  for (auto [key, out] : {std::pair{"reason", &p.reason}, std::pair{"backup", &p.backup},
                          std::pair{"error", &p.error}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_string()) return bad(key);
    *out = it->get<std::string>();
  }
  int64_t discard = 0;
  if (j.contains("discard_above")) {
    if (!integer("discard_above", &discard)) return bad("discard_above");
    p.discard_above = discard;
  }
  if (j.contains("group")) {
    STRATA_ASSIGN_OR_RETURN(p.group, GroupFromJson(j["group"], what));
  }
  return p;
}

json PlanReply::ToJson() const {
  json srcs = json::object();
  for (const auto& [rank, s] : sources) {
    json& src = srcs[std::to_string(rank)];
    src = {{"source_rank", s.source_rank}, {"holders", s.holders}, {"digest", Hex64(s.digest)}};
    if (s.decode) src["decode"] = DecodeToJson(*s.decode);
  }
  json addrs = json::object();
  for (const auto& [rank, a] : addresses) addrs[std::to_string(rank)] = a;
  json j = {{"round", round},
            {"plan_version", plan_version},
            {"step", step ? json(*step) : json(nullptr)},
            {"sources", std::move(srcs)},
            {"addresses", std::move(addrs)},
            {"reason", reason}};
  if (!backup.empty()) j["backup"] = backup;
  if (!error.empty()) j["error"] = error;
  if (discard_above) j["discard_above"] = *discard_above;
  if (group) j["group"] = GroupToJson(*group);
  return j;
}

StatusOr<RegisterReply> RegisterReply::FromJson(const json& j) {
  if (!j.is_object() || !j.contains("round") || !j["round"].is_number_integer()) {
    return InvalidArgumentError("the answer to register: \"round\" is missing or malformed");
  }
  return RegisterReply{j["round"].get<int64_t>()};
}

json RegisterReply::ToJson() const { return {{"round", round}}; }

StatusOr<ReadyReply> ReadyReply::FromJson(const json& j) {
  const std::string what = "the answer to ready";
  if (!j.is_object()) return InvalidArgumentError(what + " is not an object");
  ReadyReply r;
  for (auto [key, out] : {std::pair{"go", &r.go}, std::pair{"replan", &r.replan}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_boolean()) return InvalidArgumentError(what + ": \"" + key + "\" is malformed");
    *out = it->get<bool>();
  }
  if (r.go == r.replan) return InvalidArgumentError(what + " says neither go nor replan");
  if (auto sync = j.find("sync"); sync != j.end()) {
    STRATA_ASSIGN_OR_RETURN(r.sync, SyncDecision::FromJson(*sync));
  }
  return r;
}

json ReadyReply::ToJson() const {
  json j = json::object();
  if (go) j["go"] = true;
  if (replan) j["replan"] = true;
  if (sync) j["sync"] = sync->ToJson();
  return j;
}

}  // namespace strata::wire

// Copyright 2026 The Strata Authors.
//
// The layouts C++ owns, asked by strata.dcp's reader instead of spelled
// again in Python: the committed steps of a checkpoint directory (the step
// names, format/naming.h; ListSteps), the copies of a step the node's agent
// holds (agent/store/store_layout.h), and the committed backups of a job in a
// file:// backup (backup/layout.h). Each call reads the file system with the
// GIL released and returns plain Python values.
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "agent/store/store_layout.h"
#include "backup/layout.h"
#include "binding.h"
#include "strata/catalog.h"
#include "util/file_util.h"

namespace strata::python {
namespace {

// A committed backup of a job, as strata.dcp reads it.
struct BackupCommit {
  std::string id;
  int64_t step = 0;
  int nodes = 0;
  std::map<int, std::string> parts;  // node rank -> the directory of the part it restores
};

std::vector<int64_t> CommittedSteps(const std::string& dir) {
  return ValueOrRaise(WithoutGil([&] { return ListSteps(dir); }));
}

std::map<int, std::string> AgentStoreCopies(const std::string& local_dir, const std::string& job,
                                            int64_t step) {
  return ValueOrRaise(WithoutGil([&] { return agent::HeldStepCopies(local_dir, job, step); }));
}

// The committed backups of `job` below the file:// backup `root` (an
// absolute path), oldest first: every backup id there (backup::ParseBackupId)
// whose commit object (backup::CommitKey) decodes (backup::DecodeCommit)
// and names that id; the rest is skipped, as a restore skips it. A backup
// not committed (no commit object) or another job's is skipped quietly; one
// whose commit object cannot be read or does not decode, or names another
// id, is skipped with the error naming its path appended to `skipped`. None
// when `root` does not exist.
StatusOr<std::vector<BackupCommit>> ListBackupCommits(const std::string& root,
                                                      const std::string& job,
                                                      std::vector<std::string>* skipped) {
  std::vector<BackupCommit> out;
  Env* env = Env::Default();
  if (!env->Exists(root)) return out;
  STRATA_ASSIGN_OR_RETURN(auto entries, env->ListDir(root));
  std::vector<std::pair<backup::BackupId, std::string>> ids;
  for (const auto& e : entries) {
    auto id = backup::ParseBackupId(e.name);
    if (id.ok()) ids.emplace_back(*id, e.name);
  }
  std::sort(ids.begin(), ids.end());
  for (const auto& [unused, id] : ids) {
    const std::string path = JoinPath(root, backup::CommitKey(id));
    auto text = ReadFileToString(env, path, backup::kMaxCommitBytes);
    if (!text.ok()) {
      if (text.status().code() != StatusCode::kNotFound) {  // absent: not committed (yet)
        std::string why(text.status().message());
        skipped->push_back(why.find(path) == std::string::npos ? path + ": " + why : why);
      }
      continue;
    }
    auto commit = backup::DecodeCommit(*text, path);
    if (!commit.ok()) {
      skipped->push_back(std::string(commit.status().message()));
      continue;
    }
    if (commit->id != id) {
      skipped->push_back(path + ": the commit names backup " + commit->id + ", not " + id);
      continue;
    }
    if (commit->job != job) continue;
    BackupCommit c{id, commit->step, commit->nodes, {}};
    for (const auto& [rank, part] : commit->sources) {
      std::string prefix = backup::PartDataPrefix(id, part);  // "<id>/p<part>/"
      prefix.pop_back();
      c.parts[rank] = JoinPath(root, prefix);
    }
    out.push_back(std::move(c));
  }
  return out;
}

// backup_commits(): the commits as dicts; each skipped one is a
// RuntimeWarning naming its path.
py::list BackupCommits(const std::string& root, const std::string& job) {
  std::vector<std::string> skipped;
  auto commits = ValueOrRaise(WithoutGil([&] { return ListBackupCommits(root, job, &skipped); }));
  py::object warn = py::module_::import("warnings").attr("warn");
  for (const std::string& s : skipped) {
    warn("backup " + root + ": skipping a backup: " + s, py::handle(PyExc_RuntimeWarning));
  }
  py::list out;
  for (auto& c : commits) {
    py::dict d;
    d["id"] = c.id;
    d["step"] = c.step;
    d["nodes"] = c.nodes;
    d["parts"] = c.parts;
    out.append(d);
  }
  return out;
}

}  // namespace

void DefineLayouts(py::module_& m) {
  m.def("committed_steps", &CommittedSteps, py::arg("directory"),
        "The committed steps of a checkpoint directory, ascending (not verified).");
  m.def("agent_store_copies", &AgentStoreCopies, py::arg("local_dir"), py::arg("job"),
        py::arg("step"),
        "Node rank -> the directory of that node's steps, for every copy of `step` of `job` "
        "the agent of `local_dir` holds.");
  m.def("backup_commits", &BackupCommits, py::arg("root"), py::arg("job"),
        "The committed backups of `job` in the file:// backup directory `root`, oldest "
        "first: dicts of id, step, nodes and parts (node rank -> its part's directory).");
}

}  // namespace strata::python

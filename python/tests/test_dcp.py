"""torch.distributed.checkpoint (DCP) through Strata's tiers (strata.dcp).

A job of four gloo ranks on the CPU (dcp_worker.py: an FSDP2 fully_shard MLP
with uneven shards and its AdamW, TorchTitan's get_state_dict/set_state_dict,
dcp.async_save overlapped with the next step) saves through
StrataStorageWriter into four real `strata agent`s on loopback, which
replicate each rank's step to a peer (n -> n + 2 mod 4) and back it up
(file://). Then, on that one cluster, in this order:

* two ranks load the four-rank checkpoint (DCP resharding) from the peer
  tier: each rank reads its node's own step, the peer replica its node's
  agent holds, and the rest from the other rank over the process group;
* a node lost with its RAM (its directory wiped, its agent restarted) is
  restored from its peer, and the job saves on;
* the whole cluster lost is restored from the backup;
* the cluster lost again, two ranks load the four-rank backup.

Every load is compared, tensor by tensor and bit for bit, with the full
state (every DTensor gathered) the saving job had at that step. Also:
local directories without an agent (a two-rank save loaded at one rank,
then at two after rank 1 lost its newest step), and in-process checks of
dtypes, item names, staging, refused saves, and tampered steps (a pickle
as the metadata item or as a bytes item is refused and never runs).
"""

import collections
import gc
import json
import os
import pickle
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

import strata
import strata.dcp
import strata.export
from strata import dcp_metadata
from strata._gc import gc_paused
import conftest
from conftest import Agents
from strata._dcp_copies import (_backup_copies, _backups, _committed_steps, _read_info,
                                _store_copies)
from strata._dcp_reader import _common
from strata.dcp import METADATA_ITEM, StrataStorageReader, StrataStorageWriter

if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip(f"torch {torch.__version__} is built without torch.distributed or gloo",
                allow_module_level=True)

NODES = 4
JOB = "dcp-job"
WORKER = Path(__file__).with_name("dcp_worker.py")
RUN_TIMEOUT = 400  # seconds for every rank of a run; init_process_group waits at most 60 s
ENV = {"OMP_NUM_THREADS": "1"}


def run_ranks(root: Path, world: int, name: str, *args) -> list:
    """Runs `world` ranks of dcp_worker.py; their RESULT objects in rank order.
    Every rank is killed if the run outlives RUN_TIMEOUT."""
    ranks = conftest.run_ranks(WORKER, root, name, world, ["--ref", root / "ref", *args],
                               env=ENV, timeout=RUN_TIMEOUT)
    for rank, (result, text) in enumerate(ranks):
        assert result is not None, f"{name} rank {rank}: no RESULT\n{text[-4000:]}"
    return [result for result, _ in ranks]


def assert_loaded(results, step: int) -> None:
    for r in results:
        assert r["restored"] == step and r["differences"] == [], r


class Cluster:
    """Four agents (one per simulated node) that live for the whole module,
    and the DCP job that runs on them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.backup = root / "backup"
        self.backup.mkdir()
        (root / "ref").mkdir()
        self.first_run: list = []
        self.agents = Agents(root, NODES, ["--backup", f"file://{self.backup}"])
        for node in range(NODES):
            self.start(node)

    def start(self, node: int) -> None:
        self.agents.start(node)
        conftest._children.remove(self.agents.procs[node])  # not killed after each test: stop() does it

    def run(self, world: int, name: str, *args) -> list:
        return run_ranks(self.root, world, name, "--dir", self.root / "node{rank}", "--job", JOB,
                         "--backup", f"file://{self.backup}", "--backup-interval-steps", 4,
                         *args)

    def lose(self, nodes) -> None:
        """The nodes go away with their RAM; new agents start on empty directories."""
        for node in nodes:
            self.agents.kill(node)
            shutil.rmtree(self.agents.dir(node))
        for node in nodes:
            self.start(node)

    def wait_log(self, node: int, pattern: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.agents.log(node)):
            assert time.monotonic() < deadline, \
                f"agent {node} never logged {pattern!r}:\n{self.agents.log(node)[-3000:]}"
            time.sleep(0.1)

    def held(self, holder: int, rank: int) -> Path:
        return self.agents.dir(holder) / ".strata-agent" / "steps" / JOB / str(rank)

    def last_restore(self, node: int) -> str:
        return self.agents.status(node)["last_restore"]


@pytest.fixture(scope="module")
def cluster():
    """The four-rank job's first run: a fresh start that saves steps 2 and 4
    (step 4 replicated to every peer and backed up)."""
    root = Path(tempfile.mkdtemp(prefix="strata-pytest-dcp-",
                                 dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    c = Cluster(root)
    try:
        c.first_run = c.run(NODES, "first", "--save", "2,4")
        for node in range(NODES):
            c.wait_log((node + 2) % NODES, rf"holding replica {JOB}/{node}/4 ")
        c.wait_log(0, rf"job {JOB}: backup \S+ of step 4 committed")
        yield c
    finally:
        c.agents.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_four_fsdp2_ranks_save_each_its_own_self_sufficient_step(cluster):
    for rank, r in enumerate(cluster.first_run):
        assert r["restored"] is None and r["saved"] == [2, 4], r
        step = strata.restore_step(str(cluster.held(rank, rank)), 4)
        info = dcp_metadata.decode(step.items[METADATA_ITEM].tobytes(), "step 4")
        assert (info["rank"], info["world_size"], info["step"]) == (rank, NODES, 4), info
        # Its shards, and its own copy of every replicated item (DCP writes
        # each once): the optimizer's step counters and param_groups.
        names = set(step.items)
        assert {"app.optim.state.0.weight.step", "app.optim.param_groups.0.lr"} <= names, names
        assert any(n.startswith("app.model.0.weight@") for n in names), names
        # Its peer holds the same bytes.
        peer = strata.restore_step(str(cluster.held((rank + 2) % NODES, rank)), 4)
        assert all(numpy.array_equal(peer.items[n], step.items[n]) for n in names)


def test_the_reader_finds_the_copies_where_the_agents_and_the_backup_put_them(cluster):
    # The agents' store (C++) holds each node's step and its peer's replica
    # (n -> n + 2 mod 4), and the backup (C++) every rank's part: the
    # reader's layouts, asked of the C++ code through the binding, find
    # exactly those, each a copy of that rank's step.
    for node in range(NODES):
        copies = _store_copies(str(cluster.agents.dir(node)), JOB, 4)
        assert sorted(copies) == sorted({node, (node + 2) % NODES}), (node, copies)
        for rank, copy in copies.items():
            assert copy.steps_dir == str(cluster.held(node, rank)), copy
            assert _read_info(copy)["rank"] == rank
        assert _store_copies(str(cluster.agents.dir(node)), JOB, 3) == {}
        assert _store_copies(str(cluster.agents.dir(node)), "other-job", 4) == {}
    # A copy of a backup under a name that is no backup id is no backup.
    ids = [c["id"] for c in _backups(str(cluster.backup), JOB) if c["step"] == 4]
    assert len(ids) == 1, ids
    shutil.copytree(cluster.backup / ids[0], cluster.backup / f"copy-of-{ids[0]}")
    try:
        commits = [c for c in _backups(str(cluster.backup), JOB) if c["step"] == 4]
    finally:
        shutil.rmtree(cluster.backup / f"copy-of-{ids[0]}")
    assert len(commits) == 1 and commits[0]["nodes"] == NODES, commits
    # A backup whose commit object is damaged, or names another backup, is
    # skipped with a warning naming it; one not committed yet, quietly.
    planted = {"2000-01-01_00-00": b"{not json", "2000-01-01_00-01": None}
    shutil.copytree(cluster.backup / ids[0], cluster.backup / "2000-01-01_00-02")
    for name, text in planted.items():
        (cluster.backup / name).mkdir()
        if text is not None:
            (cluster.backup / name / "strata.backup").write_bytes(text)
    try:
        with pytest.warns(RuntimeWarning) as warned:
            assert [c["id"] for c in _backups(str(cluster.backup), JOB) if c["step"] == 4] == ids
    finally:
        for name in [*planted, "2000-01-01_00-02"]:
            shutil.rmtree(cluster.backup / name)
    said = [str(w.message) for w in warned]
    assert len(said) == 2, said
    assert str(cluster.backup / "2000-01-01_00-00" / "strata.backup") in said[0], said
    assert str(cluster.backup / "2000-01-01_00-02" / "strata.backup") in said[1], said
    assert f"names backup {ids[0]}" in said[1], said
    parts = _backup_copies(commits[0])
    assert sorted(parts) == list(range(NODES)), parts
    for rank, copy in parts.items():
        assert _read_info(copy)["rank"] == rank
    assert _backups(str(cluster.backup), "other-job") == []
    assert _backups(str(cluster.root / "no-backup"), JOB) == []
    assert not (cluster.root / "no-backup").exists()


def test_two_ranks_load_the_four_rank_checkpoint_from_the_peer_tier(cluster):
    results = cluster.run(2, "reshard-peer")
    assert_loaded(results, 4)
    # 7 rows: saved ranks hold 2, 2, 2, 1; new rank 0 needs saved 0 and 1,
    # rank 1 needs 2 and 3. Node 0's agent holds rank 2's replica, node 1's
    # rank 3's; the rest travels between the two ranks, none from the backup.
    assert results[0]["sources"] == {"0": "anchor", "1": "rank 1"}, results[0]
    assert results[1]["sources"] == {"1": "anchor", "2": "rank 0", "3": "store"}, results[1]


def test_a_lost_node_restores_from_its_peer_and_saves_on(cluster):
    cluster.lose([1])
    results = cluster.run(NODES, "lost-node", "--save", 6)
    assert_loaded(results, 4)
    assert [r["saved"] for r in results] == [[6]] * NODES, results
    assert cluster.last_restore(1) == "step 4 of node 1 from node 3"
    assert cluster.last_restore(0) == "step 4 from own store"
    for node in range(NODES):
        cluster.wait_log(node, r"ingested step 6 ")


def test_the_lost_cluster_restores_from_the_backup(cluster):
    cluster.lose(range(NODES))
    assert_loaded(cluster.run(NODES, "lost-cluster"), 4)
    for node in range(NODES):
        assert re.fullmatch(rf"step 4 of node {node} from backup \S+",
                            cluster.last_restore(node)), cluster.last_restore(node)


def test_two_ranks_load_the_four_rank_checkpoint_from_the_backup(cluster):
    cluster.lose(range(NODES))
    # The agents plan with backups of the job's node count (2) only: they
    # say "start fresh", and the reader loads the four-node backup. Each rank
    # reads its own part; what the other already has in memory travels
    # between them rather than being read from the backup twice.
    results = cluster.run(2, "reshard-backup")
    assert_loaded(results, 4)
    assert results[0]["sources"] == {"0": "anchor", "1": "rank 1"}, results[0]
    assert results[1]["sources"] == {"1": "anchor", "2": "backup", "3": "backup"}, results[1]


def test_local_directories_without_an_agent(scratch):
    (scratch / "ref").mkdir()
    dirs = ("--dir", scratch / "rank{rank}")
    saved = run_ranks(scratch, 2, "save", *dirs, "--save", "2,4")
    assert [r["saved"] for r in saved] == [[2, 4]] * 2, saved
    # strata.export gathers both ranks' step 4 into one DCP filesystem
    # checkpoint, each tensor whole: the saving job's full state, bit for bit.
    out = str(scratch / "export")
    assert strata.export.export_dcp(str(scratch / "rank{rank}"), out, 4) == 4
    md = dcp.FileSystemReader(out).read_metadata().state_dict_metadata
    got = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
           for k, m in md.items() if hasattr(m, "size")}
    dcp.load(got, storage_reader=dcp.FileSystemReader(out), no_dist=True)
    want = torch.load(scratch / "ref" / "4.pt", weights_only=True)
    tensors = {k: v for k, v in want.items() if torch.is_tensor(v)}
    assert len(tensors) == len(got) > 0, (sorted(tensors), sorted(got))
    for k, v in tensors.items():
        name = "app." + k if k.startswith("model.") else "app.optim.state." + k[len("optim."):]
        assert torch.equal(got[name], v), k
    # One rank loads both ranks' step 4: its own, and rank 1's directory.
    one = run_ranks(scratch, 1, "load-one", *dirs)
    assert_loaded(one, 4)
    assert one[0]["sources"] == {"0": "anchor", "1": "dir"}, one
    # Two ranks load step 4, each reading its own; each decodes step 4's
    # metadata only, not step 2's too.
    both = run_ranks(scratch, 2, "load", *dirs)
    assert_loaded(both, 4)
    assert [r["decoded"] for r in both] == [[4], [4]], both
    # Rank 1's step 4 has a metadata item it refuses (committed so, checksums
    # and all): both ranks go to step 2, the next one they have.
    items = dict(strata.restore_step(str(scratch / "rank1"), 4).items)
    items[METADATA_ITEM] = (b"garbled", "bytes")
    with strata.Checkpointer(str(scratch / "rank1"), max_to_keep=0, preemption_signals=[],
                             async_save=False) as c:
        c.save(4, items)
    both = run_ranks(scratch, 2, "load", *dirs)
    assert_loaded(both, 2)
    assert [r["decoded"] for r in both] == [[4, 2], [4, 2]], both
    # Rank 1's step 4 is not a DCP step at all: every rank fails at once, rank
    # 1 saying why and rank 0 naming rank 1, rather than waiting for it.
    with strata.Checkpointer(str(scratch / "rank1"), max_to_keep=0, preemption_signals=[],
                             async_save=False) as c:
        c.save(4, {"w": numpy.ones(2)})
    both = run_ranks(scratch, 2, "load", *dirs)
    assert [r["restored"] for r in both] == [None, None], both
    assert both[1]["error"].startswith("InvalidArgumentError: step 4 in "), both
    assert "not saved by StrataStorageWriter" in both[1]["error"], both
    assert both[0]["error"].startswith(
        "UnavailableError: step 4: rank 1 could not read its copy: InvalidArgumentError"), both
    # Rank 1 lost its step 4: the newest step both have is 2, the only one read.
    shutil.rmtree(scratch / "rank1" / "4")
    both = run_ranks(scratch, 2, "load", *dirs)
    assert_loaded(both, 2)
    assert [r["sources"] for r in both] == [{"0": "anchor"}, {"1": "anchor"}], both
    assert [r["decoded"] for r in both] == [[2], [2]], both


# ---- in one process (no process group) -------------------------------------

def test_the_steps_of_a_directory_are_the_ones_libstrata_lists(scratch):
    with strata.Checkpointer(str(scratch), async_save=False, preemption_signals=[]) as c:
        c.save(4, {"w": numpy.ones(2)})
        c.save(10, {"w": numpy.ones(2)})
    shutil.copytree(scratch / "4", scratch / "04")  # no canonical step name
    (scratch / "5").mkdir()                          # no manifest
    (scratch / "6").write_text("")                   # not a directory
    assert _committed_steps(str(scratch)) == [4, 10]
    assert _committed_steps(str(scratch / "missing")) == []


def test_every_dtype_round_trips_bit_for_bit_and_bytes_too(scratch):
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint16,
              torch.bool, torch.complex64, torch.float8_e4m3fn]
    g = torch.Generator().manual_seed(0)
    saved = {str(d): torch.randint(0, 2 if d == torch.bool else 256, (12 * d.itemsize,),
                                   dtype=torch.uint8, generator=g).view(d).reshape(3, 4)
             for d in dtypes}
    saved["scalar"] = torch.tensor(2.5)
    saved["not/an item name"] = torch.arange(3)  # stored under a hash
    saved["extra"] = {"epoch": 3, "name": "x"}
    writer = StrataStorageWriter(str(scratch / "d"))
    dcp.save(saved, storage_writer=writer, checkpoint_id=7,
             no_dist=True)
    writer.close()
    target = {k: torch.zeros_like(v) for k, v in saved.items() if torch.is_tensor(v)}
    target["extra"] = {"epoch": 0, "name": ""}
    reader = StrataStorageReader(str(scratch / "d"))
    assert reader.step == 7
    dcp.load(target, storage_reader=reader, no_dist=True)
    names = set(strata.restore_step(str(scratch / "d"), 7).items)
    assert {"torch.bfloat16@0,0", "torch.float8_e4m3fn@0,0", "scalar", "extra.epoch",
            METADATA_ITEM} <= names, names
    assert any(n.startswith("item-") for n in names), names
    for k, v in saved.items():
        if torch.is_tensor(v):
            assert v.dtype == target[k].dtype and torch.equal(v.reshape(-1).view(torch.uint8),
                                                              target[k].reshape(-1).view(torch.uint8)), k
    assert target["extra"] == {"epoch": 3, "name": "x"}
    # Every tensor filled a whole tensor of its dtype: the stager copied each
    # as it verified, nothing went through Python.
    assert reader.direct == sum(1 for v in saved.values() if torch.is_tensor(v))


def test_a_load_into_other_dtypes_or_parts_goes_through_host_memory(scratch):
    saved = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4),
             "b": torch.arange(4, dtype=torch.int64)}
    writer = StrataStorageWriter(str(scratch / "d"))
    dcp.save(saved, storage_writer=writer, checkpoint_id=1,
             no_dist=True)
    writer.close()
    target = {"w": torch.zeros(3, 4, dtype=torch.float64), "b": torch.zeros(4, dtype=torch.int64)}
    reader = StrataStorageReader(str(scratch / "d"))
    dcp.load(target, storage_reader=reader, no_dist=True)
    assert torch.equal(target["w"], saved["w"].double()) and torch.equal(target["b"], saved["b"])
    assert reader.direct == 1  # "b"; "w" is converted from the host copy


def test_stage_snapshots_cpu_tensors(scratch):
    writer = StrataStorageWriter(str(scratch / "d"))
    live = {"w": torch.ones(4), "nested": {"b": torch.zeros(2)}, "n": [1, 2]}
    staged = writer.stage(live)
    live["w"].add_(1)
    live["nested"]["b"].add_(1)
    live["n"].append(3)
    assert torch.equal(staged["w"], torch.ones(4))
    assert torch.equal(staged["nested"]["b"], torch.zeros(2)) and staged["n"] == [1, 2]
    # The staging memory is reused: not while the previous save is written from it.
    writer._writing = 3
    with pytest.raises(strata.FailedPreconditionError, match="step 3 is still being written"):
        writer.stage({"w": torch.ones(4)})
    writer._writing = None
    writer.close()


def test_a_save_without_the_step_or_with_plan_caching_is_refused(scratch):
    writer = StrataStorageWriter(str(scratch / "d"))
    with pytest.raises(CheckpointException, match=r"pass checkpoint_id=<step>"):
        dcp.save({"w": torch.ones(2)}, storage_writer=writer, no_dist=True)
    with pytest.raises(CheckpointException, match=r"enable_plan_caching is not supported"):
        dcp.save({"w": torch.ones(2)}, storage_writer=writer, checkpoint_id=1, no_dist=True,
                 planner=DefaultSavePlanner(enable_plan_caching=True))
    assert not (scratch / "d").exists() or not os.listdir(scratch / "d")
    writer.close()
    assert StrataStorageReader(str(scratch / "d")).step is None


class _Payload:
    """Unpickling it creates `path` (what a malicious pickle would do)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickled_metadata_item_is_refused_and_nothing_of_it_runs(scratch):
    d = str(scratch / "d")
    writer = StrataStorageWriter(d)
    dcp.save({"w": torch.arange(6.0).reshape(2, 3)}, storage_writer=writer,
             checkpoint_id=1, no_dist=True)
    writer.close()
    # Step 2: step 1's items, its metadata item replaced by a pickle that
    # creates a file when it is unpickled, committed (checksums and all) as
    # a peer or a backup holding tampered bytes would hand it over.
    ran = scratch / "payload-ran"
    payload = pickle.dumps(_Payload(ran))
    one = strata.restore_step(d, 1)
    items = {n: a for n, a in one.items.items() if n != METADATA_ITEM}
    items[METADATA_ITEM] = (payload, "bytes")
    with strata.Checkpointer(d, max_to_keep=0, preemption_signals=[], async_save=False) as c:
        c.save(2, items)

    reader = StrataStorageReader(d)
    with pytest.warns(RuntimeWarning, match=r"step 2 in .*: the DCP metadata item is refused: "
                                            r"it is a pickle .* does not unpickle"):
        assert reader.step == 1  # refused as a corrupt step is: the older one is loaded
    target = {"w": torch.zeros(2, 3)}
    dcp.load(target, storage_reader=reader, no_dist=True)
    assert torch.equal(target["w"], torch.arange(6.0).reshape(2, 3))
    # Asked for by name, it fails to load, saying why.
    reader = StrataStorageReader(d)
    reader.reset(checkpoint_id=2)
    with pytest.raises(CheckpointException, match=r"step 2 in .* is a pickle"):
        dcp.load(target, storage_reader=reader, checkpoint_id=2, no_dist=True)
    assert not ran.exists()
    pickle.loads(payload)  # the payload is live: unpickled, it runs
    assert ran.exists()


def test_the_metadata_item_is_json_and_anything_else_is_refused(scratch):
    d = str(scratch / "d")
    writer = StrataStorageWriter(d)
    dcp.save({"w": torch.ones(3, dtype=torch.bfloat16), "n": 7}, storage_writer=writer,
             checkpoint_id=1, no_dist=True)
    writer.close()
    blob = strata.restore_step(d, 1).items[METADATA_ITEM].tobytes()
    doc = json.loads(blob)
    assert (doc["format"], doc["version"], doc["step"]) == ("strata-dcp", 2, 1), doc
    md = dcp_metadata.decode(blob, "step 1")["metadata"]
    assert md.state_dict_metadata["w"].properties.dtype == torch.bfloat16
    assert md.state_dict_metadata["w"].size == torch.Size([3])
    assert md.planner_data == {"w": ("w",), "n": ("n",)}
    for bad, why in [(b"not json", "is not JSON"),
                     (json.dumps(dict(doc, version=1)).encode(), "version 1"),
                     (blob.replace(b'"bfloat16"', b'"os.system"'), "dtype 'os.system'"),
                     (blob.replace(b'"size":[3]', b'"size":["3"]'), "is str, not int"),
                     (blob.replace(b'"size":[3]', b'"size":[true]'), "is bool, not int"),
                     (blob.replace(b'"size":[3]', b'"size":3'), "is int, not list"),
                     (blob.replace(b'"requires_grad":false', b'"requires_grad":0'),
                      "is int, not bool")]:
        with pytest.raises(strata.DataLossError, match=why):
            dcp_metadata.decode(bad, "step 1")


def test_metadata_decodes_on_a_torch_whose_tensor_properties_keep_no_strides(monkeypatch):
    """torch 2.11's TensorProperties has no `strides` field (newer ones do):
    a step saved by either decodes, the strides dropped there. The stand-in
    is that dataclass's fields; the real torch 2.11 was run on the GPU
    machine (docs/performance.md)."""
    import dataclasses
    from torch.distributed.checkpoint.metadata import TensorProperties
    old = dataclasses.make_dataclass("TensorProperties", [
        (f.name, f.type, dataclasses.field(default=f.default))
        for f in dataclasses.fields(TensorProperties) if f.name != "strides"])
    w = torch.arange(6.0).reshape(2, 3)
    md = dcp.metadata.Metadata(state_dict_metadata={"w": dcp.metadata.TensorStorageMetadata(
        properties=TensorProperties.create_from_tensor(w), size=w.size(),
        chunks=[dcp.metadata.ChunkStorageMetadata(offsets=torch.Size([0, 0]),
                                                  sizes=w.size())])})
    blob = dcp_metadata.encode(md, step=1, rank=0, world_size=1, locations={})
    monkeypatch.setattr(dcp_metadata, "TensorProperties", old)
    monkeypatch.setattr(dcp_metadata, "_PROPERTIES_HAVE_STRIDES", True)
    with pytest.raises(TypeError, match="strides"):  # what every load on torch 2.11 met
        dcp_metadata.decode(blob, "step 1")
    monkeypatch.setattr(dcp_metadata, "_PROPERTIES_HAVE_STRIDES", False)
    decoded = dcp_metadata.decode(blob, "step 1")["metadata"].state_dict_metadata["w"]
    assert isinstance(decoded.properties, old) and decoded.properties.dtype == torch.float32
    assert decoded.size == torch.Size([2, 3])


def test_a_pickle_in_a_bytes_item_is_refused_and_nothing_of_it_runs(scratch):
    d = str(scratch / "d")
    writer = StrataStorageWriter(d)
    dcp.save({"w": torch.arange(3.0), "extra": {"epoch": 3, "betas": (0.9, 0.95)}},
             storage_writer=writer, checkpoint_id=1, no_dist=True)
    writer.close()
    # Step 2: step 1 with its bytes item "extra.epoch" replaced by a pickle
    # that creates a file when it is unpickled (the metadata names step 2).
    ran = scratch / "payload-ran"
    one = strata.restore_step(d, 1)
    items = dict(one.items)
    assert "extra.epoch" in items, sorted(items)
    items["extra.epoch"] = (pickle.dumps(_Payload(ran)), "bytes")
    doc = json.loads(items[METADATA_ITEM].tobytes())
    items[METADATA_ITEM] = (json.dumps(dict(doc, step=2)).encode(), "bytes")
    with strata.Checkpointer(d, max_to_keep=0, preemption_signals=[], async_save=False) as c:
        c.save(2, items)

    target = {"w": torch.zeros(3), "extra": {"epoch": 0, "betas": (0.0, 0.0)}}
    reader = StrataStorageReader(d)
    assert reader.step == 2
    with pytest.raises(CheckpointException, match=r"step 2: 'extra.epoch': the bytes item is "
                                                  r"refused: torch's weights_only unpickler"):
        dcp.load(target, storage_reader=reader, no_dist=True)
    assert not ran.exists()
    assert gc.isenabled()  # read_data failed inside a pause of the collector
    # Step 1's plain values pass the check and load.
    reader = StrataStorageReader(d)
    reader.reset(checkpoint_id=1)
    dcp.load(target, storage_reader=reader, checkpoint_id=1, no_dist=True)
    assert target["extra"] == {"epoch": 3, "betas": (0.9, 0.95)}
    assert torch.equal(target["w"], torch.arange(3.0))


def test_ranks_agree_on_an_older_step_only_where_each_reads_it_from_its_own_copy():
    # The steps each rank of a group holds, as the reader gathers them when
    # the newest step is refused on some rank. Without an agent a rank with
    # no steps reads the Metadata from another rank's directory: it stands
    # in no one's way.
    assert _common([[2, 4], [], [4, 2]], every_rank=False) == [4, 2]
    assert _common([[2], [2, 3]], every_rank=False) == [2]
    assert _common([[], []], every_rank=False) == []
    # With agents each rank reads its own store's copy: a node restored with
    # the newest step only leaves no older step to agree on (the backup is
    # next), rather than a step that rank then fails to load.
    assert _common([[2], [], [2]], every_rank=True) == []
    assert _common([[2, 3], [3]], every_rank=True) == [3]


def test_alone_the_reader_decodes_the_newest_readable_metadata_only(scratch, monkeypatch):
    d = str(scratch / "d")
    writer = StrataStorageWriter(d, max_to_keep=3)
    for step in (1, 2, 3):
        dcp.save({"w": torch.full((2,), float(step))}, storage_writer=writer,
                 checkpoint_id=step, no_dist=True)
    writer.close()
    read = []
    decode = strata._dcp_copies._read_info
    for module in (strata._dcp_copies, strata._dcp_reader):  # both names of it
        monkeypatch.setattr(module, "_read_info", lambda c: read.append(c.step) or decode(c))
    assert StrataStorageReader(d).step == 3
    assert read == [3]
    # Step 4: step 3's items with a garbled metadata item, committed so (checksums
    # and all): step 3 is the newest readable, and the only older one read.
    items = dict(strata.restore_step(d, 3).items)
    items[METADATA_ITEM] = (b"garbled", "bytes")
    with strata.Checkpointer(d, max_to_keep=0, preemption_signals=[], async_save=False) as c:
        c.save(4, items)
    read.clear()
    reader = StrataStorageReader(d)
    with pytest.warns(RuntimeWarning, match=r"step 4 in .*: the DCP metadata item is refused"):
        assert reader.step == 3
    assert read == [4, 3]
    target = {"w": torch.zeros(2)}
    dcp.load(target, storage_reader=reader, no_dist=True)
    assert torch.equal(target["w"], torch.full((2,), 3.0)) and read == [4, 3]


# The reader's and writer's Python that runs once per item of a save or a
# load (strata/_gc.py says why the collector is paused there).
_PAUSED = {"_dcp_writer.py": {"prepare_local_plan", "prepare_global_plan", "_items"},
           "_dcp_reader.py": {"read_metadata", "set_up_storage_reader", "prepare_local_plan",
                              "prepare_global_plan", "read_data"}}


def test_no_collection_starts_while_a_many_tensor_state_is_planned_or_decoded(scratch):
    """A thousand tensors: every collection that starts is traced back
    through the Python stack to the reader's or writer's method it started
    in, if any."""
    state = {f"layer{i}.{part}": torch.full((4,), float(i)) for i in range(250)
             for part in ("weight", "bias", "norm", "scale")}
    started_in = collections.Counter()
    started = []

    def on_collection(phase, info):
        started.append(phase == "start")
        frame = sys._getframe(1)
        while phase == "start" and frame is not None:
            code = frame.f_code
            if code.co_name in _PAUSED.get(os.path.basename(code.co_filename), ()):
                started_in[code.co_name] += 1
                return
            frame = frame.f_back

    threshold = gc.get_threshold()
    gc.set_threshold(100)  # a collection every 100 new containers
    gc.callbacks.append(on_collection)
    try:
        writer = StrataStorageWriter(str(scratch / "d"))
        dcp.save(state, storage_writer=writer, checkpoint_id=1, no_dist=True)
        dcp.async_save(state, storage_writer=writer, checkpoint_id=2, no_dist=True).result()
        writer.close()
        loaded = {k: torch.zeros(4) for k in state}
        dcp.load(loaded, storage_reader=StrataStorageReader(str(scratch / "d")), no_dist=True)
    finally:
        gc.callbacks.remove(on_collection)
        gc.set_threshold(*threshold)
    assert not started_in, started_in
    assert sum(started) > 100  # DCP's own planning set off collections as ever
    assert gc.isenabled()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


def test_pauses_in_several_threads_resume_the_collector_once_all_ended():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def second():
        first_in.wait()
        with gc_paused():
            second_in.set()
            first_out.wait()
            seen["after the first ended"] = gc.isenabled()
        seen["after both ended"] = gc.isenabled()

    thread = threading.Thread(target=second)
    thread.start()
    with gc_paused():
        first_in.set()
        second_in.wait()
    first_out.set()
    thread.join()
    assert seen == {"after the first ended": False, "after both ended": True}
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was paused before: it stays so
    finally:
        gc.enable()

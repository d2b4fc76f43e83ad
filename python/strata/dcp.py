"""PyTorch Distributed Checkpoint (torch.distributed.checkpoint, "DCP")
through Strata's tiers.

    import torch.distributed.checkpoint as dcp
    from strata.dcp import StrataStorageReader, StrataStorageWriter

    job = strata.AgentJob("llama", node_rank=rank, nodes=world)
    reader = StrataStorageReader(directory, agent_job=job)
    if reader.step is not None:                     # None: start fresh
        dcp.load(state, storage_reader=reader)
    writer = StrataStorageWriter(directory, agent_job=job)
    dcp.async_save(state, storage_writer=writer, checkpoint_id=step,
                   process_group=checkpoint_group)    # DCP's own planner

docs/python.md ("PyTorch Distributed Checkpoint") is the guide. The design:

* Each rank's write items are that rank's Strata step `checkpoint_id` in
  its own directory (with an agent job: the node agent's directory, so the
  agent replicates it to peers and backs it up). An item is named by its
  MetadataIndex: `fqn` for bytes and 0-d tensors, `fqn@o0,o1,...` for the
  tensor chunk at those offsets (a hash when that is no valid item name).
* DCP's global `Metadata` is in every rank's step, as the item
  `__strata_dcp__` (JSON, with the rank and world size: dcp_metadata.py;
  nothing is unpickled on a restore), written in the same atomic commit as
  the rank's data. Why every rank's and not only the coordinator's: a
  node's step is then self-sufficient, so the step the agent restores for a
  node (from its RAM, a peer or the backup) is all that node needs, and no
  rank waits for rank 0's data to learn the layout. A step is complete for
  the job exactly when every rank's commit is: the agent's "newest step
  complete on every node" is a consistent DCP checkpoint, and `finish` has
  nothing left to write. The price: the coordinator sends the Metadata to
  every rank with its plan, O(ranks x metadata) bytes per save.
* Replicated items (plain tensors and bytes every rank has, DDP/HSDP
  replicas): DCP's planner (any planner that plans as DefaultSavePlanner
  does) keeps each on one rank only. The writer keeps each rank's whole
  local plan and writes its own copy of every item it has, so a rank's step
  holds everything that rank loads at the same world size and layout; it
  builds the Metadata from the planner's deduplicated plans as DCP does,
  and Metadata.storage_data maps each index to (item, ranks holding it).
* Loading picks the step: the agent's (the handshake, once per process and
  directory), else the newest step every rank has in its own directory.
  Items of other ranks (another world size or layout: DCP resharding) are
  read from the nearest tier that holds them: this rank's step, a copy on
  this node (the agent's store: its peers' replicas; other ranks'
  directories in local mode), another rank of the job that holds one on its
  node (sent over the process group), a file:// backup.
"""

from strata._dcp_copies import METADATA_ITEM
from strata._dcp_reader import StrataStorageReader
from strata._dcp_writer import StrataStorageWriter

__all__ = ["METADATA_ITEM", "StrataStorageReader", "StrataStorageWriter"]

"""A way out of (and into) Strata for DCP checkpoints.

    python -m strata.export dcp DIR OUT [--step N] [--backup URL --job NAME]
    python -m strata.export safetensors DIR OUT [--step N] ...
    python -m strata.export import DCP_DIR DIR --step N

`dcp`: the step strata.dcp saved (every rank's part, gathered: DIR is the
ranks' directory template with "{rank}", e.g. copies of the nodes' RAM
disks or a shared file system; or a file:// backup of `job`) as one
torch.distributed.checkpoint filesystem checkpoint in OUT, each tensor
whole: dcp.load(..., storage_reader=FileSystemReader(OUT)) loads it, at
any world size. `safetensors`: its tensors as OUT/model.safetensors (the
flattened names; non-tensor values are left out and listed in the file's
metadata). `import`: a DCP filesystem checkpoint as step N of DIR (one
rank's step: DIR without "{rank}" is rank 0's directory).

The export reads through StrataStorageReader (every chunk verified, bytes
items checked by torch's weights_only unpickler unless --allow-pickle).
The import reads DCP's own `.metadata`, which DCP pickles: import only
checkpoints you trust.
"""

import argparse
import os
import sys
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

import strata
from strata.dcp import StrataStorageReader, StrataStorageWriter

__all__ = ["gather", "export_dcp", "export_safetensors", "import_dcp"]


def _empty_state(metadata: Metadata) -> Dict[str, Any]:
    """A flat state dict with room for every value of `metadata`: each
    tensor whole (global size), each bytes item a placeholder."""
    return {fqn: torch.empty(tuple(md.size), dtype=md.properties.dtype)
            if isinstance(md, TensorStorageMetadata) else None
            for fqn, md in metadata.state_dict_metadata.items()}


def gather(directory: str, step: Optional[int] = None, *, backup: Optional[str] = None,
           job: Optional[str] = None, allow_pickle: bool = False) -> Tuple[int, Dict[str, Any]]:
    """(step, flat state dict) of a strata.dcp checkpoint, in this process:
    `step`, or the newest one every rank's directory holds. Tensors are
    whole; keys are DCP's flattened names."""
    reader = StrataStorageReader(directory, backup=backup, job=job, allow_pickle=allow_pickle)
    if step is not None:
        reader.reset(checkpoint_id=step)
    found = reader.step
    if found is None:
        raise strata.NotFoundError(f"{directory}: no strata.dcp step to export")
    state = _empty_state(reader.read_metadata())
    dcp.load(state, storage_reader=reader, checkpoint_id=found, no_dist=True)
    return found, state


def export_dcp(directory: str, out: str, step: Optional[int] = None, **options: Any) -> int:
    """Writes the step as a DCP filesystem checkpoint in `out`; its step."""
    found, state = gather(directory, step, **options)
    dcp.save(state, storage_writer=dcp.FileSystemWriter(out), no_dist=True)
    return found


def export_safetensors(directory: str, out: str, step: Optional[int] = None,
                       **options: Any) -> int:
    """Writes the step's tensors as `out`/model.safetensors; its step."""
    from safetensors.torch import save_file
    found, state = gather(directory, step, **options)
    tensors = {k: v.contiguous() for k, v in state.items() if torch.is_tensor(v)}
    others = sorted(k for k in state if k not in tensors)
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"),
              metadata={"strata_step": str(found), "left_out": ",".join(others)})
    return found


def import_dcp(source: str, directory: str, step: int) -> None:
    """Saves the DCP filesystem checkpoint `source` as step `step` of
    `directory` (a strata.dcp step StrataStorageReader loads)."""
    reader = dcp.FileSystemReader(source)
    state = _empty_state(reader.read_metadata())
    dcp.load(state, storage_reader=reader, no_dist=True)
    writer = StrataStorageWriter(directory)
    try:
        dcp.save(state, storage_writer=writer, checkpoint_id=step, no_dist=True)
    finally:
        writer.close()


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m strata.export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["dcp", "safetensors", "import"])
    p.add_argument("source", help="the Strata directory (template), or for import DCP's")
    p.add_argument("target", help="the output directory, or for import the Strata directory")
    p.add_argument("--step", type=int, default=None)
    p.add_argument("--backup", default=None, help="a file:// backup to read from")
    p.add_argument("--job", default=None, help="the job whose backup is read")
    p.add_argument("--allow-pickle", action="store_true",
                   help="load bytes items torch's weights_only unpickler refuses")
    args = p.parse_args(argv)
    if args.what == "import":
        if args.step is None:
            p.error("import needs --step")
        import_dcp(args.source, args.target, args.step)
        print(f"imported {args.source} as step {args.step} of {args.target}")
        return 0
    options = {"backup": args.backup, "job": args.job, "allow_pickle": args.allow_pickle}
    export = export_dcp if args.what == "dcp" else export_safetensors
    step = export(args.source, args.target, args.step, **options)
    print(f"exported step {step} of {args.source} to {args.target} ({args.what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

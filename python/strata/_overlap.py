"""The copies an overlapped strata.torch save may still be making after
save() returned, and the gate that fails the save when a copied tensor
changed under its copy."""

import threading
from typing import Optional, Set, Tuple

import torch

import strata
from strata._tree import _Encoder


class _Pending:
    """The copies an overlapped save may still make after save() returned:
    of the deferrable tensors `encoder` saw, with the version each had.
    Until order() has made the devices' current streams wait for the copies,
    an in-place change of one of those tensors may race with its copy: the
    gate (called by the committing thread once every copy is checksummed)
    then fails the save rather than let a torn copy be committed."""

    def __init__(self, ckpt: strata.Checkpointer, encoder: _Encoder) -> None:
        self._ckpt = ckpt
        self._tensors = encoder.deferred
        self._versions = [t._version for t in self._tensors]
        self._devices = sorted(encoder.devices)
        self._ordered = False  # some stream was ordered after the copies
        self._streams: Set[Tuple[int, int]] = set()  # (device, stream) ordered so far
        self._done = False  # the copies were waited for on the host
        self._error: Optional[str] = None
        self._lock = threading.Lock()

    def _changed(self, when: str) -> None:
        changed = [i for i, (t, v) in enumerate(zip(self._tensors, self._versions))
                   if t._version != v]
        if changed and self._error is None:
            self._error = (f"{len(changed)} saved tensor(s) changed in place after save() "
                           f"returned and before {when} (call wait_staged() before changing "
                           "saved tensors outside optimizer.step())")

    def order(self) -> None:
        """Orders every later kernel of the devices' current streams after the
        copies (no host wait), each stream once: an optimizer that steps on
        another stream is ordered too. While the current stream captures a
        CUDA graph, the copies are waited for on the host instead (a captured
        stream may not wait on an event recorded outside the capture)."""
        with self._lock:
            if self._done:
                return
            if not self._ordered:
                self._changed("their staging copy was ordered")
        if torch.cuda.is_current_stream_capturing():
            self._ckpt.wait_staged()
            with self._lock:
                self._ordered = self._done = True
            return
        todo = [(d, torch.cuda.current_stream(d).cuda_stream) for d in self._devices]
        todo = [s for s in todo if s not in self._streams]
        for device, stream in todo:
            try:
                self._ckpt.order_after_staging(stream, device)
            except strata.FailedPreconditionError:
                if not self._ckpt.closed:
                    raise
                break  # closed (another thread's close()): it waited for the copies
        with self._lock:
            self._ordered = True
            self._streams.update(todo)

    def gate(self) -> None:
        """The save's gate: raises (the save then fails) if a copied tensor may
        have changed under its copy."""
        with self._lock:
            if not self._ordered:
                self._changed("their staging copy was done")  # a change that raced is visible now
            if self._error:
                raise RuntimeError(self._error)

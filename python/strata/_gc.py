"""Pausing Python's cyclic garbage collector around the Python-heavy parts
of a save or a restore.

Encoding, planning and decoding a state of thousands of tensors allocates
tens of thousands of small containers. A collection starts every few
hundred new containers, and the objects alive at that moment move to the
older generations; every so many of those moves start a collection of the
oldest generation, which walks every object of the process, the model's
and the framework's included (about 150 ms for a process of 345,000
objects on the benchmark machine). Paused, the temporaries are freed by
their reference counts before any collection sees them, and the objects
that live on are counted once, at the next collection after the pause.
"""

import contextlib
import gc
import threading

# Reentrant: a signal handler that saves runs in the main thread between
# two bytecodes, possibly inside one of the blocks below; each block
# leaves the state consistent at every point such a nested pause can
# start.
_lock = threading.RLock()
_depth = 0           # pauses in progress, in every thread
_resume = False      # whether the collector ran before the first of them


@contextlib.contextmanager
def gc_paused():
    """The collector paused for the block, and resumed after it if it ran
    before the first pause in progress (in any thread) began. Usable as a
    decorator: @gc_paused(). Thread-safe: overlapping pauses in several
    threads resume the collector once, when the last one ends. A
    gc.disable() by other code during a pause is undone when it ends."""
    global _depth, _resume
    with _lock:
        _depth += 1
        if _depth == 1:
            _resume = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _lock:
            resume = _resume  # read first: a pause nested from here on sets it anew
            _depth -= 1
            if _depth == 0 and resume:
                gc.enable()

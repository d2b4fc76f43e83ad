"""One case of test_emulated_cuda.py, in a fresh interpreter whose CUDA
runtime is the emulated one (STRATA_CUDART: tests/harness/emulated_cudart.cc,
two devices). Device memory and streams come from that runtime through
ctypes; strata's stager binding (python/src/stager.cc) gets them as
strata.torch and strata.dcp hand over CUDA tensors: addresses, device
ordinals and {device: stream} maps.

Usage: emulated_cuda_worker.py CASE DIRECTORY   (prints "ok" when it passes)
"""

import ctypes
import os
import sys

import numpy as np

import strata

CU = ctypes.CDLL(os.environ["STRATA_CUDART"])
H2D, D2H = 1, 2


def check(err, call):
    assert err == 0, f"{call}: CUDA error {err}"


def on(device):
    check(CU.cudaSetDevice(device), "cudaSetDevice")


def malloc(device, n):
    on(device)
    p = ctypes.c_void_p()
    check(CU.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)), "cudaMalloc")
    on(0)
    return p.value


def stream(device):
    on(device)
    s = ctypes.c_void_p()
    check(CU.cudaStreamCreateWithFlags(ctypes.byref(s), 1), "cudaStreamCreateWithFlags")
    on(0)
    return s.value


def upload(p, data):
    check(CU.cudaMemcpy(ctypes.c_void_p(p), data, ctypes.c_size_t(len(data)), H2D), "cudaMemcpy")


def download(p, n):
    buf = ctypes.create_string_buffer(n)
    check(CU.cudaMemcpy(buf, ctypes.c_void_p(p), ctypes.c_size_t(n), D2H), "cudaMemcpy")
    return buf.raw


def memset_async(p, value, n, s):
    check(CU.cudaMemsetAsync(ctypes.c_void_p(p), value, ctypes.c_size_t(n), ctypes.c_void_p(s)),
          "cudaMemsetAsync")


def synchronize(s):
    check(CU.cudaStreamSynchronize(ctypes.c_void_p(s)), "cudaStreamSynchronize")


class State:
    """An item on each device and one in host memory, with their bytes."""

    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        self.a_bytes = rng.integers(0, 256, (1 << 20) + 3, dtype=np.uint8).tobytes()
        self.b_bytes = rng.standard_normal(4096).astype(np.float32).tobytes()
        self.host = np.arange(4, dtype=np.int64) * seed
        self.a, self.b = malloc(0, len(self.a_bytes)), malloc(1, len(self.b_bytes))
        upload(self.a, self.a_bytes)
        upload(self.b, self.b_bytes)
        self.streams = {0: stream(0), 1: stream(1)}
        self.batch = strata.Batch([("a", "uint8", [len(self.a_bytes)], len(self.a_bytes), 0, True),
                                   ("b", "float32", [4096], len(self.b_bytes), 1, True),
                                   ("h", "int64", [4], 32, -1, False)])

    def pointers(self):
        return [self.a, self.b, self.host.ctypes.data]


def saved_bytes(directory, step, name):
    return strata.restore_step(directory, step).items[name].tobytes()


def overlapped_save(directory):
    """An overlapped save from two devices copies each buffer after the work
    queued on the stream handed over for its device (a chain of writes that
    ends with the value saved), and commits the bytes as they were then: the
    write ordered after staging on that stream (the optimizer's step)
    changes the buffer only after the copy."""
    s = State(3)
    n = len(s.a_bytes)
    for value in range(40):  # each operation of an emulated stream is 300 us late
        memset_async(s.a, value, n, s.streams[0])
    memset_async(s.a, 0x42, n, s.streams[0])
    with strata.Checkpointer(directory, preemption_signals=[]) as ckpt:
        ckpt.save_batch(1, s.batch, s.pointers(), streams=s.streams, overlap=True)
        for device, st in s.streams.items():
            ckpt.order_after_staging(st, device)
        memset_async(s.a, 0x77, n, s.streams[0])
        ckpt.wait()
        staging = ckpt.staging
        assert staging["devices"] == 2 and staging["pinned"] and staging["in_place"], staging
        assert saved_bytes(directory, 1, "a") == b"\x42" * n
        assert saved_bytes(directory, 1, "b") == s.b_bytes
        assert saved_bytes(directory, 1, "h") == s.host.tobytes()
        synchronize(s.streams[0])
        assert download(s.a, n) == b"\x77" * n
        # The next save sees the buffer as the stream left it.
        ckpt.save_batch(2, s.batch, s.pointers(), streams=s.streams)
        ckpt.wait()
        assert saved_bytes(directory, 2, "a") == b"\x77" * n


def planned_restore(directory):
    """restore_planned() copies each planned item onto its device, after the
    work queued on the stream it names; copy_to_host() copies from both."""
    s = State(5)
    with strata.Checkpointer(directory, preemption_signals=[]) as ckpt:
        ckpt.save_batch(4, s.batch, s.pointers(), streams=s.streams)
        ckpt.wait()
        # Queued before the restore on the stream the plan names: the
        # restored bytes land after it.
        memset_async(s.a, 0, len(s.a_bytes), s.streams[0])
        upload(s.b, bytes(len(s.b_bytes)))
        seen = []

        def plan(step, key):
            seen.append((step, bytes(key)))
            return [("a", s.a, len(s.a_bytes), 0, s.streams[0]),
                    ("b", s.b, len(s.b_bytes), 1, s.streams[1])]

        restored = ckpt.restore_planned("h", plan)
        assert restored.step == 4 and seen == [(4, s.host.tobytes())], seen
        assert download(s.a, len(s.a_bytes)) == s.a_bytes
        assert download(s.b, len(s.b_bytes)) == s.b_bytes
    dst = [np.zeros(len(s.a_bytes), np.uint8), np.zeros(4096, np.float32)]
    strata.copy_to_host([s.a, s.b], [len(s.a_bytes), len(s.b_bytes)], [0, 1],
                        [d.ctypes.data for d in dst], streams=s.streams)
    assert dst[0].tobytes() == s.a_bytes and dst[1].tobytes() == s.b_bytes


def refusals(directory):
    """A device the runtime does not have, and a destination larger than its
    item, are refused naming the item; nothing is committed or copied."""
    s = State(7)
    with strata.Checkpointer(directory, preemption_signals=[]) as ckpt:
        bad = strata.Batch([("a", "uint8", [len(s.a_bytes)], len(s.a_bytes), 2, False)])
        try:
            ckpt.save_batch(1, bad, [s.a])
            raise AssertionError("a save from device 2 of 2 was not refused")
        except strata.InvalidArgumentError as e:
            assert '"a"' in str(e), e
        ckpt.save_batch(1, s.batch, s.pointers(), streams=s.streams)
        ckpt.wait()
        upload(s.a, bytes(len(s.a_bytes)))
        try:
            ckpt.restore_planned("h", lambda step, key: [("a", s.a, len(s.a_bytes) + 1, 0, 0)])
            raise AssertionError("a destination larger than its item was not refused")
        except strata.InvalidArgumentError as e:
            assert '"a"' in str(e), e
        assert download(s.a, len(s.a_bytes)) == bytes(len(s.a_bytes))


CASES = {f.__name__: f for f in (overlapped_save, planned_restore, refusals)}

if __name__ == "__main__":
    CASES[sys.argv[1]](sys.argv[2])
    print("ok")

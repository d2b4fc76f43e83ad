"""strata.Checkpointer from Python: buffers in, NumPy views out, errors as
exceptions with the library's messages, the GIL released while waiting."""

import signal
import threading
import time

import numpy as np
import pytest

import strata


def test_every_numpy_dtype_round_trips_with_its_shape(scratch):
    items = {
        "bool": np.array([True, False, True]),
        "i8": np.arange(-4, 4, dtype=np.int8),
        "u8": np.arange(8, dtype=np.uint8),
        "i16": np.arange(6, dtype=np.int16).reshape(2, 3),
        "u16": np.arange(6, dtype=np.uint16),
        "i32": np.arange(24, dtype=np.int32).reshape(2, 3, 4),
        "u32": np.arange(5, dtype=np.uint32),
        "i64": np.arange(-3, 3, dtype=np.int64),
        "u64": np.array([2**64 - 1], dtype=np.uint64),
        "f16": np.linspace(0, 1, 7, dtype=np.float16),
        "f32": np.random.default_rng(1).standard_normal((16, 16), dtype=np.float32),
        "f64": np.array([np.pi, -np.inf, np.nan]),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(7, items)
        ckpt.wait()
        restored = ckpt.restore()
    assert restored.step == 7
    assert restored.dtypes["f16"] == "float16" and restored.dtypes["u64"] == "uint64"
    for name, want in items.items():
        got = restored.items[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want)


def test_restored_arrays_are_views_over_the_restored_memory(scratch):
    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"a": np.ones(1024, np.float32), "b": np.zeros(16, np.int64)})
        restored = ckpt.restore()
    a, b = restored.items["a"], restored.items["b"]
    assert a.base is not None and b.base is not None  # not copies
    assert a.flags.writeable
    del restored  # the arrays keep the memory alive on their own
    a += 1
    assert float(a.sum()) == 2048.0 and int(b.sum()) == 0


def test_the_arrays_are_made_when_first_read_and_kept(scratch):
    a, b = np.arange(1024, dtype=np.float32), np.arange(16, dtype=np.int64)
    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"a": a, "b": b})
        restored = ckpt.restore()
    # The checkpointer is closed and no array was made yet: the restored
    # object alone keeps the step's memory.
    assert repr(restored) == "Restored(step=1, 2 items)"
    dtypes = restored.dtypes
    assert dtypes == {"a": "float32", "b": "int64"}
    assert restored.items is restored.items and restored.dtypes is dtypes
    np.testing.assert_array_equal(restored.items["a"], a)
    np.testing.assert_array_equal(restored.items["b"], b)


def test_bytes_and_dtype_overrides(scratch):
    bits = np.array([0x3F80, 0x4000], dtype=np.uint16)  # bfloat16 1.0, 2.0
    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"blob": b"hello", "bf16": (bits, "bfloat16"),
                      "raw": (np.arange(4, dtype=np.int32), "bytes")})
        restored = ckpt.restore()
    assert restored.items["blob"].tobytes() == b"hello"
    assert restored.dtypes["bf16"] == "bfloat16"
    np.testing.assert_array_equal(restored.items["bf16"], bits)
    assert restored.items["raw"].shape == (16,)
    with strata.Checkpointer(str(scratch / "x")) as ckpt:
        with pytest.raises(ValueError, match="item 'w': dtype float32 has 4-byte elements"):
            ckpt.save(1, {"w": (bits, "float32")})
        with pytest.raises(ValueError, match="unknown dtype 'float128'"):
            ckpt.save(1, {"w": (bits, "float128")})


def test_restore_into_fills_the_callers_buffers(scratch):
    a = np.arange(100, dtype=np.float64)
    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(3, [("a", a), ("b", b"xyz")])
        into_a, into_b = np.zeros(100), bytearray(3)
        assert ckpt.restore_into({"a": into_a, "b": into_b}) == 3
        np.testing.assert_array_equal(into_a, a)
        assert into_b == b"xyz"
        with pytest.raises(strata.InvalidArgumentError, match='"a"'):
            ckpt.restore_into({"a": np.zeros(99), "b": bytearray(3)})
        with pytest.raises(ValueError, match="item 'b': not a writable buffer"):
            ckpt.restore_into({"a": into_a, "b": b"xyz"})


def test_nothing_to_restore_is_none_and_a_missing_step_is_an_error(scratch):
    with strata.Checkpointer(str(scratch)) as ckpt:
        assert ckpt.restore() is None
        assert ckpt.restore_into({}) is None
        with pytest.raises(strata.NotFoundError, match="42"):
            ckpt.restore(step=42)


def test_bad_input_raises_with_the_librarys_message(scratch):
    with pytest.raises(strata.InvalidArgumentError, match="max_to_keep is negative"):
        strata.Checkpointer(str(scratch), max_to_keep=-1)
    with strata.Checkpointer(str(scratch)) as ckpt:
        with pytest.raises(strata.FailedPreconditionError, match="in use by another"):
            strata.Checkpointer(str(scratch))
        with pytest.raises(TypeError, match="item 'x': list does not support the buffer"):
            ckpt.save(1, {"x": [1, 2, 3]})
        with pytest.raises(ValueError, match="item 'x': the buffer is not C-contiguous"):
            ckpt.save(1, {"x": np.zeros((4, 4))[:, ::2]})
        with pytest.raises(strata.InvalidArgumentError, match="contains '/'"):
            ckpt.save(1, {"a/b": np.zeros(1)})
        with pytest.raises(ValueError, match="has no Strata dtype"):
            ckpt.save(1, {"c": np.zeros(2, np.complex64)})
        assert ckpt.restore() is None  # nothing was saved by the failed calls
    with pytest.raises(strata.FailedPreconditionError, match="is closed"):
        ckpt.save(2, {})


def test_on_demand_save_commits_and_asks_to_exit(scratch):
    with strata.Checkpointer(str(scratch), save_interval_steps=100, exit_after_ondemand=True,
                             preemption_signals=[signal.SIGUSR1], use_agent=False) as ckpt:
        assert not ckpt.should_save(5)
        signal.raise_signal(signal.SIGUSR1)  # the notice
        assert ckpt.status.notices >= 1
        assert ckpt.should_save(5)
        result = ckpt.save(5, {"w": np.ones(8)})
        assert (result.step, result.on_demand, result.committed, result.should_exit) == \
            (5, True, True, True)
        assert not ckpt.should_save(6)
        assert ckpt.status.last_committed_step == 5
    assert strata.EXIT_AFTER_ON_DEMAND == 75


def test_async_save_returns_before_the_commit_and_wait_reports_it(scratch):
    with strata.Checkpointer(str(scratch)) as ckpt:
        big = np.ones(16 << 20, dtype=np.uint8)
        result = ckpt.save(1, {"big": big})
        assert not result.committed
        big[:] = 0  # the save took its snapshot already
        ckpt.wait()
        assert ckpt.status.last_committed_step == 1
        assert int(ckpt.restore().items["big"].min()) == 1


def test_waiting_for_the_agent_releases_the_gil(scratch):
    """A thread blocked in the agent handshake (no agent runs) must not stop
    Python code in other threads."""
    job = strata.AgentJob("gil", node_rank=0, nodes=1, timeout=5)
    errors = []

    def handshake():
        try:
            strata.agent_handshake(str(scratch), job)
        except strata.DeadlineExceededError as e:
            errors.append(e)

    t = threading.Thread(target=handshake)
    t.start()
    time.sleep(0.2)  # the thread is inside the handshake now
    spins, end = 0, time.monotonic() + 0.3
    while time.monotonic() < end:
        spins += 1
    assert t.is_alive(), "the handshake returned early"
    assert spins > 1000
    t.join()
    assert errors and "no agent accepted" in str(errors[0])


def test_agent_job_is_validated(scratch):
    with pytest.raises(strata.InvalidArgumentError, match=r"node rank 3 is not in \[0, 2\)"):
        strata.agent_handshake(str(scratch), strata.AgentJob("j", node_rank=3, nodes=2))
    with pytest.raises(strata.InvalidArgumentError, match="unknown client style"):
        strata.agent_handshake(str(scratch), strata.AgentJob("j", style="nemox"))
    with strata.Checkpointer(str(scratch), agent_job=strata.AgentJob("j", timeout=1)) as c:
        with pytest.raises(strata.InvalidArgumentError, match="the agent chooses the step"):
            c.restore(step=3)


def test_restore_step_reads_a_directory_without_a_checkpointer(scratch):
    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(4, {"w": np.arange(3, dtype=np.int32)})
    r = strata.restore_step(str(scratch), 4)
    assert r.step == 4 and list(r.items["w"]) == [0, 1, 2]
    with pytest.raises(strata.NotFoundError):
        strata.restore_step(str(scratch), 5)


def test_close_while_another_thread_saves_waits_for_the_save(scratch):
    ckpt = strata.Checkpointer(str(scratch), async_save=False, io_threads=1)
    big = np.ones(32 << 20, dtype=np.uint8)
    done = []
    t = threading.Thread(target=lambda: done.append(ckpt.save(1, {"big": big})))
    t.start()
    time.sleep(0.02)
    ckpt.close()  # must not free the checkpointer under the save
    t.join()
    assert done and done[0].committed
    with pytest.raises(strata.FailedPreconditionError, match="is closed"):
        ckpt.should_save(1)
    assert strata.restore_step(str(scratch), 1).items["big"].sum() == 32 << 20


def test_all_steps_corrupt_raises_instead_of_starting_fresh(scratch):
    with strata.Checkpointer(str(scratch), async_save=False) as ckpt:
        ckpt.save(1, {"w": np.arange(1000, dtype=np.float32)})
    data = max((p for p in (scratch / "1").iterdir()), key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    with strata.Checkpointer(str(scratch)) as ckpt:
        with pytest.raises(strata.DataLossError, match="skipped corrupt steps 1"):
            ckpt.restore()


def test_restored_arrays_of_every_dtype_are_aligned(scratch):
    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"a": np.ones(13, np.uint8), "b": np.ones(3, np.float64),
                      "c": np.ones(7, np.int16), "d": np.ones(5, np.float32)})
        restored = ckpt.restore()
    for name, a in restored.items.items():
        assert a.ctypes.data % 64 == 0, name
        assert a.flags.aligned, name


class Interrupted(Exception):
    pass


def test_an_interrupt_ends_a_wait_for_the_agent(scratch):
    old = signal.signal(signal.SIGINT, lambda *_: (_ for _ in ()).throw(Interrupted()))
    try:
        timer = threading.Timer(0.3, lambda: signal.pthread_kill(threading.main_thread().ident,
                                                                 signal.SIGINT))
        timer.start()
        start = time.monotonic()
        with pytest.raises(Interrupted):
            strata.agent_handshake(str(scratch), strata.AgentJob("j", timeout=60))
        assert time.monotonic() - start < 30
        timer.join()
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_timed_out_handshake_does_not_block_the_next_one(scratch):
    job = strata.AgentJob("j", timeout=1)
    assert job.timeout == 1
    for _ in range(2):  # the second attempt must not find the first one's yaml stale
        with pytest.raises(strata.DeadlineExceededError, match="no agent accepted"):
            strata.agent_handshake(str(scratch), job)
    assert not (scratch / "replicator.yaml").exists()
    with pytest.raises(strata.InvalidArgumentError, match="timeout must be a finite number"):
        strata.AgentJob("j", timeout=-1)
    with pytest.raises(strata.InvalidArgumentError, match="grace_period must be"):
        strata.Checkpointer(str(scratch / "x"), grace_period=float("inf"))

"""host.Stream: only an end we caused is a clean end; a plugin's own CANCELLED is an error."""

from __future__ import annotations

import sys
import threading

import grpc
import pytest
from support import PLUGINS
from support.processes import Launcher

from nomad_device.host import CallError, Stream

CANCELS = [sys.executable, str(PLUGINS / "cancels_streams.py")]
#: The fixture plugin keeps a Stats stream with this interval open until we cancel it.
STAYS_OPEN = 7.0


def _drain(stream: Stream[object]) -> tuple[int, BaseException | None]:
    """Iterate to the end in a thread (never hangs the test): messages and how it ended."""
    box: list[tuple[int, BaseException | None]] = []

    def run() -> None:
        count = 0
        try:
            for _ in stream:
                count += 1
        except BaseException as exc:
            box.append((count, exc))
        else:
            box.append((count, None))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert box, "the stream neither ended nor failed"
    return box[0]


def test_a_plugin_cancelling_its_fingerprint_stream_is_an_error(launch: Launcher) -> None:
    stream = launch(CANCELS).client.fingerprint()
    count, ended = _drain(stream)
    assert count == 1
    assert isinstance(ended, CallError)
    assert ended.code == grpc.StatusCode.CANCELLED
    assert ended.details == "the plugin gave up"


def test_a_plugin_cancelling_its_stats_stream_is_an_error(launch: Launcher) -> None:
    stream = launch(CANCELS).client.stats(1.0)
    assert next(stream) == []
    with pytest.raises(CallError) as failed:
        next(stream)
    assert failed.value.code == grpc.StatusCode.CANCELLED
    assert failed.value.method == "Stats"


def test_our_cancel_is_a_clean_end(launch: Launcher) -> None:
    stream = launch(CANCELS).client.stats(STAYS_OPEN)
    assert next(stream) == []
    stream.cancel()
    with pytest.raises(StopIteration):
        next(stream)


def test_a_timeout_in_next_is_our_cancel(launch: Launcher) -> None:
    stream = launch(CANCELS).client.stats(STAYS_OPEN)
    assert stream.next(10) == []
    with pytest.raises(TimeoutError):
        stream.next(0.2)
    with pytest.raises(StopIteration):
        next(stream)


def test_leaving_the_with_block_ends_cleanly(launch: Launcher) -> None:
    with launch(CANCELS).client.stats(STAYS_OPEN) as stream:
        assert next(stream) == []
    assert _drain(stream) == (0, None)


@pytest.mark.parametrize("how", ["kill", "close"])
def test_our_closing_the_connection_ends_streams_cleanly(launch: Launcher, how: str) -> None:
    client = launch(CANCELS).client
    stream = client.stats(STAYS_OPEN)
    assert next(stream) == []
    result: list[tuple[int, BaseException | None]] = []
    reader = threading.Thread(target=lambda: result.append(_drain(stream)), daemon=True)
    reader.start()
    if how == "kill":
        client.kill()
    else:
        client.process.close()
    reader.join(30)
    assert result == [(0, None)]

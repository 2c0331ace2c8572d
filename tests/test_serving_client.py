"""The robot side of action chunking: ChunkQueue's rows, requests and seams in sync, async and rtc execution (no
clock), and ChunkExecutor's control loop against a real server (a thread of this process)."""

from __future__ import annotations

import numpy as np
import pytest

from DiT4DiT.serving.client import ChunkExecutor, ChunkQueue, PolicyClient, supports_rtc
from DiT4DiT.serving.server import running_server
from helpers.fixtures_serving import example

CHUNK = 8


def reply(first: float, width: int = 2) -> dict:
    """A chunk whose row i is [first + i] * width in robot units, and a tenth of that normalised."""
    rows = (first + np.arange(CHUNK, dtype=np.float32))[:, None].repeat(width, 1)
    return {"actions": rows[None], "normalized_actions": rows[None] / 10}


def run(queue: ChunkQueue, replies: list[dict], steps: int, delay: int) -> tuple[list, list[dict]]:
    """Drive `queue` as the simulators do: a request answered `delay` steps later. (rows executed, None for a hold;
    the fields each request carried)."""
    executed, asked, pending = [], [], None
    for _ in range(steps):
        if pending is not None and pending[1] == 0:
            queue.received(pending[0])
            pending = None
        if queue.wants_request():
            fields = queue.request_fields(delay)
            queue.sent(fields)
            asked.append(fields)
            pending = [replies[min(len(asked), len(replies)) - 1], delay]  # the last reply again past the list
            if delay == 0:
                queue.received(pending[0])
                pending = None
        row = queue.pop()
        executed.append(None if row is None else float(row[0]))
        if pending is not None:
            pending[1] -= 1
    return executed, asked


def test_sync_executes_whole_chunks_and_holds_while_the_next_is_computed():
    queue = ChunkQueue("sync")
    executed, asked = run(queue, [reply(0), reply(100), reply(200)], steps=2 * CHUNK + 2, delay=2)
    assert executed[:2] == [None, None]  # the first chunk too is waited for
    assert executed[2:10] == list(range(8)) and executed[10:12] == [None, None]
    assert executed[12:] == [100, 101, 102, 103, 104, 105]
    assert asked == [{}, {}]
    assert [s.consumed for s in queue.switches] == [0, 0]
    assert queue.seam_jumps() == [pytest.approx(np.hypot(100 - 7, 100 - 7))]  # robot units, L2 over the row
    assert queue.step_changes == [pytest.approx(np.sqrt(2))] * (7 + 5)  # within chunks: rows 1 apart


def test_async_asks_early_and_skips_the_rows_consumed_meanwhile():
    queue = ChunkQueue("async", execution_horizon=4)
    executed, asked = run(queue, [reply(0), reply(100), reply(200)], steps=13, delay=3)
    # Asked at 4 rows left (after rows 0-3); 3 more ran (4-6); the new chunk starts at its row 3.
    assert executed[3:13] == [0, 1, 2, 3, 4, 5, 6, 103, 104, 105]
    assert asked == [{}, {}, {}] and [s.consumed for s in queue.switches] == [0, 3]
    assert queue.seam_jumps()[0] == pytest.approx(np.hypot(103 - 6, 103 - 6))


def test_rtc_requests_carry_the_leftover_rows_normalised_and_the_delay():
    queue = ChunkQueue("rtc", execution_horizon=4, max_delay=2)
    executed, asked = run(queue, [reply(0), reply(100)], steps=12, delay=3)
    assert asked[0] == {}
    leftover = asked[1]
    np.testing.assert_array_equal(leftover["prev_actions"], reply(0)["normalized_actions"][0, 4:])
    # The delay asked for is capped at the server's max_delay; the overlap is the whole leftover.
    assert leftover["inference_delay"] == 2 and leftover["execution_horizon"] == 4
    assert queue.switches[1].delay_sent == 2 and queue.switches[1].consumed == 3
    assert executed[3:11] == [0, 1, 2, 3, 4, 5, 6, 103]


def test_a_reply_without_robot_units_executes_the_normalised_rows():
    queue = ChunkQueue("sync")
    queue.sent({})
    queue.received({"normalized_actions": reply(0)["normalized_actions"]})  # the original's server
    assert queue.pop()[0] == pytest.approx(0.0) and queue.pop()[0] == pytest.approx(0.1)


def test_a_reply_with_no_request_in_flight_names_the_missing_sent_call():
    with pytest.raises(RuntimeError, match=r"no request in flight: call sent\(\)"):
        ChunkQueue("sync").received(reply(0))


def test_only_our_server_is_taken_for_real_time_chunking(tiny_policy):
    assert not supports_rtc({"env": "simpler_env"})  # what the original's server sends (UPSTREAM_SPEC 8.1)
    assert supports_rtc(tiny_policy.metadata())
    with pytest.raises(ValueError, match="execution mode 'fast': use one of sync, async, rtc"):
        ChunkQueue("fast")


# --- the real-time executor against a server ------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tiny_policy):
    with running_server(tiny_policy) as running:
        yield running


class Recorder:
    """The robot: records every row executed; and every request and reply the client made."""

    def __init__(self, client: PolicyClient):
        self.rows, self.requests, self.replies = [], [], []
        infer = client.infer

        def recorded(examples, **options):
            self.requests.append(examples[0])
            self.replies.append(infer(examples, **options))
            return self.replies[-1]

        client.infer = recorded

    def observe(self) -> dict:
        return {**example(len(self.requests)), "seed": len(self.requests)}

    def act(self, row) -> None:
        self.rows.append(np.asarray(row))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async", "rtc"])
def test_the_executor_runs_each_reply_from_the_rows_its_delay_skips(server, mode):
    with PolicyClient("127.0.0.1", server.port) as client:
        robot = Recorder(client)
        report = ChunkExecutor(client, robot.observe, robot.act, rate_hz=50, mode=mode, execution_horizon=4).run(30)
    assert report.mode == mode and len(robot.rows) == 30 and len(report.switches) == len(robot.replies)
    # Every row executed is, in order, a reply's row from the first one its measured delay left.
    expected = []
    for switch, answer, following in zip(report.switches, robot.replies, report.switches[1:] + [None]):
        start, stop = switch.consumed, CHUNK
        if following is not None and mode != "sync":  # asked at 4 rows left; `following.consumed` more ran
            stop = min(CHUNK, max(start, CHUNK - 4) + following.consumed)
        expected.extend(answer["actions"][0][start:stop])
    assert np.array_equal(np.stack(robot.rows), np.stack(expected[:30]))
    if mode == "sync":
        assert all(s.consumed == 0 for s in report.switches) and report.held_ticks == len(report.switches)
    for request, before, switch in zip(robot.requests[1:], report.switches, report.switches[1:]):
        assert ("prev_actions" in request) == (mode == "rtc")
        if mode == "rtc":  # the rows left when it asked, aligned with the new chunk
            left = CHUNK - max(before.consumed, 4)
            previous = robot.replies[report.switches.index(before)]["normalized_actions"][0]
            np.testing.assert_array_equal(request["prev_actions"], previous[CHUNK - left:])
            assert request["inference_delay"] == switch.delay_sent <= left


@pytest.mark.slow
def test_against_a_server_without_real_time_chunking_the_executor_runs_sync(server, caplog):
    with PolicyClient("127.0.0.1", server.port) as client:
        client.metadata = {"env": "simpler_env"}  # the original's metadata: no rtc support named
        robot = Recorder(client)
        report = ChunkExecutor(client, robot.observe, robot.act, rate_hz=50, mode="rtc").run(10)
    assert report.mode == "sync" and "executing its chunks in sync mode, not rtc" in caplog.text
    assert all("prev_actions" not in request for request in robot.requests)

"""SocketReader: a connection's reads without trio's stream layer keep the stream's contract
(bytes, b"" at the end, trio's errors) and still yield to the other tasks and to a
cancellation while data keeps coming."""

from __future__ import annotations

import socket
import struct

import pytest
import trio

from zabby.server.clients.sockets import READS_BETWEEN_CHECKPOINTS, SocketReader, receiver


async def connected_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = trio.socket.socket()
    await client.connect(listener.getsockname())
    server, _ = await listener.accept()
    listener.close()
    return trio.SocketStream(client), trio.SocketStream(server)


def test_it_reads_what_was_sent_waits_for_more_and_ends_with_empty_bytes() -> None:
    async def main() -> None:
        near, far = await connected_pair()
        receive = receiver(far, 1 << 16)
        await near.send_all(b"hello")
        assert await receive() == b"hello"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(near.send_all, b"later")  # while the reader waits
            assert await receive() == b"later"
        await near.aclose()
        assert await receive() == b""
        await far.aclose()

    trio.run(main)


def test_a_tls_stream_keeps_receive_some() -> None:
    async def main() -> None:
        near, far = await connected_pair()
        assert isinstance(receiver(far, 10).__self__, SocketReader)  # type: ignore[attr-defined]
        wrapped = trio.StapledStream(far, far)  # any other stream
        assert receiver(wrapped, 10).func == wrapped.receive_some  # type: ignore[attr-defined]
        await near.aclose()
        await far.aclose()

    trio.run(main)


def test_a_socket_closed_by_another_task_is_a_closed_resource_not_a_read_of_another_fd() -> None:
    async def main() -> None:
        near, far = await connected_pair()
        reader = SocketReader(far.socket, 1 << 16)
        async with trio.open_nursery() as nursery:

            async def close_soon() -> None:
                await trio.sleep(0.05)
                await far.aclose()

            nursery.start_soon(close_soon)
            with pytest.raises(trio.ClosedResourceError):
                await reader.receive()  # waiting when the socket is closed
        with pytest.raises(trio.ClosedResourceError):
            await reader.receive()  # and after it
        await near.aclose()

    trio.run(main)


def test_a_reset_connection_is_a_broken_resource() -> None:
    async def main() -> None:
        near, far = await connected_pair()
        near.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await near.send_all(b"x")
        near.socket.close()  # with linger 0: a reset
        reader = SocketReader(far.socket, 1 << 16)
        with pytest.raises(trio.BrokenResourceError, match="socket connection broken"):
            for _ in range(3):
                await reader.receive()
        await far.aclose()

    trio.run(main)


def test_reads_that_always_find_data_still_let_other_tasks_run_and_a_cancel_in() -> None:
    """One byte per read, far more of them waiting than the reader takes between checkpoints."""

    async def main() -> None:
        near, far = await connected_pair()
        await near.send_all(b"x" * (10 * READS_BETWEEN_CHECKPOINTS))
        await trio.sleep(0.05)
        reader = SocketReader(far.socket, 1)
        ran: list[int] = []
        with trio.fail_after(5):  # a reader that never yields reads all, then waits for more
            await read_until_the_other_task_ran(reader, ran)
        with trio.CancelScope() as scope:
            scope.cancel()
            for _ in range(READS_BETWEEN_CHECKPOINTS + 1):
                await reader.receive()
        assert scope.cancelled_caught
        await near.aclose()
        await far.aclose()

    trio.run(main)


async def read_until_the_other_task_ran(reader: SocketReader, ran: list[int]) -> None:
    reads = 0

    async def other() -> None:
        ran.append(reads)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        while not ran:
            assert await reader.receive() == b"x"
            reads += 1
    # it ran at one of the reader's checkpoints: the first, or the next one if the
    # scheduler's batch (in random order) ran the reader first
    assert ran == [reads - 1] and reads <= 2 * READS_BETWEEN_CHECKPOINTS

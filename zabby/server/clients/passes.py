"""What one pass of trio's scheduler may spend on clients' requests and on applying txns.

Theory of operation: trio runs each task that is ready once, one step each, then looks at the
sockets again; that round is a pass.  A request that arrives during a pass is read in the next
one, so a bystander's read waits for whatever the pass it arrived in does, whoever asked for it.
Sixty connections each handing in a middle-sized multi at once were all decoded and prepared
in one pass (44 multis of 946 setData, 15 KB each: a pass of 0.3 s), and on a leader each batch
of acknowledgements applied a turn of the engine of its own (18,690 ops in one go, 0.4-0.55 s).
So the server bounds what a pass does in all, whatever many tasks take part in it:

* request bytes decoded and prepared, ``request_bytes`` (``PASS_REQUEST_BYTES``): a connection
  takes its frames while each fits what is left, then waits its turn in the lane (a FIFO lock:
  the connections the budget stopped are served in the order they stopped).  In its turn it
  takes the next frame whatever its size, in the first pass where nothing else large was done
  (it takes the engine's turn, ``Engine.take_turn``), and goes on while the rest fit.  A frame
  that does not fit a pass's whole budget (a multi of thousands of ops) is so always taken
  alone.  A connection's first frame of a step is taken whatever is left if it is small
  (``SMALL_FRAME_BYTES``: a read, a write of a small value): a bystander's request never waits
  in the lane behind the large ones.
* ops applied, the engine's turn (``config.turn_ops_max``; a txn whole in a turn that applied
  nothing yet): it begins once a pass, here, not in each batch of work that runs the engine, so
  the batches of many connections and peer links in one pass share it.

A pass so does at most the budget's bytes, one frame over them, one small frame per
connection, and one large thing: a frame in its lane turn (at most ``jute.maxbuffer``,
``maxRequestOps`` ops) or a turn of applies (``turn_ops_max`` ops, or one txn of more); and
the pass after one with a large thing has none (``Engine.begin_turn``), so a request that
came in meanwhile waits for one large thing, not two.  A pass begins where trio calls the
Instrument hook ``after_io_wait``, one call a pass; per frame, a connection compares its
size with what is left.
"""

from __future__ import annotations

from typing import Protocol

import trio

# 16 KiB: a multi of about 1,000 setData in msgpack (16 bytes an op), ~6 ms to decode and
# prepare on this project's 2-core machine when quiet.  Pipelined writes never reach it: 128
# writes in flight across a whole ensemble (the benchmarks') are ~15 KB.
PASS_REQUEST_BYTES = 16 * 1024
# A read, or a write of a small value: ~32 ops of a multi at most, ~0.2 ms.
SMALL_FRAME_BYTES = 512


class EngineTurn(Protocol):
    def begin_turn(self) -> None: ...

    def take_turn(self) -> bool:
        """Take the whole turn for one large thing, if nothing was applied in it yet."""
        ...


class PassBudget(trio.abc.Instrument):
    """The server's budget for the pass running now (see the module's docstring): installed
    with ``trio.lowlevel.add_instrument`` by the task that runs the server's effects."""

    def __init__(self, turn: EngineTurn, request_bytes: int = PASS_REQUEST_BYTES) -> None:
        self.turn = turn
        self.request_bytes = request_bytes
        self.request_bytes_left = request_bytes  # connections take from it, and write back what is left
        self.lane = trio.Lock()  # connections whose next frame did not fit, one at a time, in order

    def after_io_wait(self, timeout: float) -> None:
        self.request_bytes_left = self.request_bytes
        self.turn.begin_turn()

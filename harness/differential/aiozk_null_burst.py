"""Bursts of null-data writes through aiozk (run by ``harness.differential.aiozk_suite.null_bursts``
with the python of aiozk's cached virtualenv, which has no zabby):

    python aiozk_null_burst.py HOSTS ROOT CLIENTS BURSTS SIZE

CLIENTS sessions (each on the next host of HOSTS, round robin) each send BURSTS bursts of SIZE
creates with data None (aiozk sends a buffer of length -1: null), all pipelined at once, then
SIZE setData of None to the same nodes at once.  Prints one JSON object: how many requests were
sent, answered and failed (with the first few errors).
"""

import asyncio
import json
import sys

from aiozk import ZKClient

REQUEST_TIMEOUT_S = 30.0


async def one_client(hosts, root, number, bursts, size, counts):
    client = ZKClient(hosts, session_timeout=30)
    await client.start()
    try:
        for burst in range(bursts):
            paths = [f"{root}/c{number}-b{burst}-{i}" for i in range(size)]
            for requests in ([client.create(path, data=None) for path in paths], [client.set_data(path, None, force=True) for path in paths]):
                counts["sent"] += len(requests)
                try:
                    outcomes = await asyncio.wait_for(asyncio.gather(*requests, return_exceptions=True), REQUEST_TIMEOUT_S)
                except asyncio.TimeoutError:  # the burst's unanswered requests: counted failed, this client stops
                    counts["failed"] += len(requests)
                    counts["errors"].append(f"client {number}: burst {burst} not answered in {REQUEST_TIMEOUT_S:.0f} s")
                    return
                for outcome in outcomes:
                    if isinstance(outcome, BaseException):
                        counts["failed"] += 1
                        if len(counts["errors"]) < 5:
                            counts["errors"].append(repr(outcome))
                    else:
                        counts["answered"] += 1
    finally:
        await client.close()


async def main(hosts, root, clients, bursts, size):
    counts = {"sent": 0, "answered": 0, "failed": 0, "errors": []}
    servers = hosts.split(",")
    setup = ZKClient(hosts)
    await setup.start()
    await setup.ensure_path(root)
    await setup.close()
    await asyncio.gather(*(one_client(servers[n % len(servers)], root, n, bursts, size, counts) for n in range(clients)))
    print(json.dumps(counts))


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))

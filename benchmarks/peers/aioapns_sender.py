#!/usr/bin/env python3
"""The aioapns peer: APNs pushes the way Zulip's server sends them (aioapns, token
auth with an ES256 .p8 key), paced at a fixed rate against an APNs endpoint, or
unpaced (--rate 0: as fast as --concurrency pushes in flight let).

aioapns connects only to Apple's hosts (APNS_SERVER / APNS_PORT on its protocol
classes), so the pool is pointed at --url with a subclass of its production protocol.
The TLS context trusts --ca and offers ALPN "h2" (the fake, like any HTTP/2 server
behind ALPN, speaks HTTP/1.1 to a client that does not ask for h2). One more shim: the
fake ends a 200's stream with an empty DATA frame, which aioapns 4.0 cannot parse
(it would drop the connection after every success); empty DATA is ignored.

Prints one JSON object: pushes, statuses, errors, CPU seconds of this process (all
threads, getrusage) over the measured window, wall seconds.
"""

import argparse
import asyncio
import importlib.metadata
import json
import logging
import os
import resource
import ssl
import sys
import time
import urllib.parse
import uuid

from aioapns import APNs, NotificationRequest, PushType
from aioapns.connection import APNsProductionClientProtocol


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def message_of_size(size: int) -> dict:
    """A body shaped like the relay's, `size` bytes as aioapns serializes it."""
    message = {
        "aps": {"alert": {"title": "New notification"}, "mutable-content": 1},
        "encrypted_data": "",
        "push_key_id": 1,
    }
    base = len(json.dumps(message, ensure_ascii=False).encode())
    message["encrypted_data"] = "A" * max(0, size - base)
    return message


async def run(args) -> dict:
    url = urllib.parse.urlsplit(args.url)

    class Endpoint(APNsProductionClientProtocol):
        APNS_SERVER = url.hostname
        APNS_PORT = url.port or 443

        def on_data_received(self, raw_data: bytes, stream_id: int) -> None:
            # The fake (Hummingbird) ends a 200's stream with an empty DATA frame where
            # Apple sends HEADERS with END_STREAM; aioapns would json.loads(b"") and drop
            # the connection. Only a refusal's body carries a reason.
            if raw_data:
                super().on_data_received(raw_data, stream_id)

    context = ssl.create_default_context(cafile=args.ca)
    context.set_alpn_protocols(["h2"])
    with open(args.key) as f:
        key = f.read()
    apns = APNs(
        key=key,
        key_id=args.key_id,
        team_id=args.team_id,
        topic=args.topic,
        ssl_context=context,
        max_connections=args.max_connections,
        err_func=lambda request, result: asyncio.sleep(0),  # counted below instead of logged
    )
    apns.pool.protocol_class = Endpoint

    tokens = [os.urandom(32).hex() for _ in range(args.devices)]
    message = message_of_size(args.payload_bytes)
    in_flight = asyncio.Semaphore(args.concurrency)

    async def one(i: int, tally: dict) -> None:
        try:
            request = NotificationRequest(
                device_token=tokens[i % len(tokens)],
                message=message,
                notification_id=str(uuid.uuid4()),
                time_to_live=86400,
                priority=10,
                collapse_key=f"{i % len(tokens)}",
                push_type=PushType.ALERT,
            )
            result = await apns.send_notification(request)
            tally["statuses"][result.status] = tally["statuses"].get(result.status, 0) + 1
            if not result.is_successful:
                problem = f"{result.status} {result.description}"
                tally["errors"][problem] = tally["errors"].get(problem, 0) + 1
        except Exception as error:  # noqa: BLE001 - a transport failure is an error to count
            problem = type(error).__name__ + (f": {error}" if str(error) else "")
            tally["errors"][problem] = tally["errors"].get(problem, 0) + 1
        finally:
            in_flight.release()

    async def paced(count: int) -> dict:
        tally = {"statuses": {}, "errors": {}}
        tasks = []
        start = time.monotonic()
        for i in range(count):
            if args.rate > 0:
                delay = start + i / args.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await in_flight.acquire()
            tasks.append(asyncio.create_task(one(i, tally)))
        await asyncio.gather(*tasks)
        return tally

    pace = f"at {args.rate}/s" if args.rate > 0 else "unpaced"
    log(f"aioapns sender: warm-up {args.warmup} pushes {pace}")
    await paced(args.warmup)
    log(f"aioapns sender: measuring {args.n} pushes {pace}")
    cpu0, t0 = cpu_seconds(), time.monotonic()
    tally = await paced(args.n)
    cpu, wall = cpu_seconds() - cpu0, time.monotonic() - t0
    apns.pool.close()

    return {
        "sender": "aioapns",
        "version": importlib.metadata.version("aioapns"),
        "pushes": args.n,
        "statuses": tally["statuses"],
        "errors": sum(tally["errors"].values()),
        "error_samples": dict(list(tally["errors"].items())[:20]),
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "payload_bytes": len(json.dumps(message, ensure_ascii=False).encode()),
        "rate": args.rate,
        "python": sys.version.split()[0],
    }


def log(line: str) -> None:
    print(time.strftime("[%H:%M:%S] ") + line, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True, help="APNs base URL, e.g. https://localhost:8443")
    parser.add_argument("--ca", required=True)
    parser.add_argument("--key", required=True, help=".p8 signing key")
    parser.add_argument("--key-id", required=True)
    parser.add_argument("--team-id", required=True)
    parser.add_argument("--topic", default="org.zulip.Zulip")
    parser.add_argument("--rate", type=int, default=400, help="pushes per second (0: unpaced)")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("-n", type=int, default=12000)
    parser.add_argument("--payload-bytes", type=int, default=634)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--max-connections", type=int, default=10, help="aioapns's default")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(asyncio.run(run(args)), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()

"""Capacity of the simulator server: N concurrent streams from a minimal raw-socket client.

Usage: python benchmarks/simserver_capacity.py STREAMS SPEED [ROUNDS]
Reports streamed tok/s and, per 1M tokens, the CPU seconds of the server and of this client
measured in the same run: their ratio says whether the server could be a client benchmark's
bottleneck (a ratio well below 1 means the client saturates first).
"""

import asyncio
import json
import socket
import subprocess
import sys
import time

import psutil

N = int(sys.argv[1])
SPEED = sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
proc = subprocess.Popen(
    [
        sys.executable,
        "-m",
        "servingctl_twin.simserver",
        "--port",
        str(port),
        "--speed",
        SPEED,
        "--max-num-seqs",
        str(N),
        "--max-num-batched-tokens",
        str(max(2048, 4 * N)),
        "--log-level",
        "warning",
    ]
)
body = json.dumps(
    {
        "messages": [{"role": "user", "content": "benchmark " * 200}],
        "max_tokens": 256,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
).encode()
req = (
    f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
).encode() + body


async def one(reader, writer):
    writer.write(req)
    await writer.drain()
    buf = b""
    while b"data: [DONE]" not in buf[-64:]:
        data = await reader.read(65536)
        if not data:
            raise RuntimeError("closed")
        buf += data
    i = buf.rfind(b'"completion_tokens":')
    return int(buf[i + 20 : buf.index(b"}", i)])


async def main():
    for _ in range(200):
        try:
            _r, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            break
        except OSError:
            await asyncio.sleep(0.05)
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(N)]
    p = psutil.Process(proc.pid)
    for rnd in range(ROUNDS):
        me = psutil.Process()
        own0 = sum(me.cpu_times()[:2])
        cpu0 = sum(p.cpu_times()[:2])
        t0 = time.monotonic()
        toks = await asyncio.gather(*(one(r, w) for r, w in conns))
        dt = time.monotonic() - t0
        cpu = sum(p.cpu_times()[:2]) - cpu0
        own = sum(me.cpu_times()[:2]) - own0
        print(
            f"round {rnd}: {N} streams, {sum(toks)} tokens in {dt:.2f} s = {sum(toks) / dt:,.0f} tok/s; "
            f"server CPU {cpu:.2f} s = {cpu / sum(toks) * 1e6:.1f} s per 1M tokens; "
            f"client {own / sum(toks) * 1e6:.1f}; server/client {cpu / own:.2f}"
        )


asyncio.run(main())
proc.terminate()
proc.wait()

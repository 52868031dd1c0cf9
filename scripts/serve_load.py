"""A load check of `fusegrpo serve` (issue 66): 50 clients at once over raw
sockets, a mix of what real clients do, bounded in time. Prints one JSON
line: requests answered of those expected, latency p50/p99 of the answered
completions, hang-ups seen by the server, and its peak RSS.

    python3 scripts/serve_load.py --addr 127.0.0.1:PORT --pid PID [--clients 50]

Clients (in this proportion): keep-alive clients sending 3 completions each
on one connection; `Connection: close` and HTTP/1.0 clients; slow clients
that send their body a few bytes at a time over ~2 s; clients that hang up
50 ms after sending (their generation should stop, and they count apart).
"""
import argparse, json, socket, statistics, threading, time


def read_response(s):
    got = b""
    while b"\r\n\r\n" not in got:
        b = s.recv(65536)
        if not b:
            raise ConnectionError("closed before a response head")
        got += b
    head, _, body = got.partition(b"\r\n\r\n")
    status = int(head[9:12])
    length = None
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    if length is None:
        while True:
            b = s.recv(65536)
            if not b:
                break
            body += b
    else:
        while len(body) < length:
            b = s.recv(65536)
            if not b:
                raise ConnectionError("closed inside a body")
            body += b
        body = body[:length]
    return status, body


def request(body, version="HTTP/1.1", close=False):
    extra = "Connection: close\r\n" if close else ""
    return (f"POST /v1/chat/completions {version}\r\nHost: x\r\n{extra}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--deadline", type=float, default=120.0)
    a = ap.parse_args()
    host, port = a.addr.rsplit(":", 1)
    addr = (host, int(port))
    lock = threading.Lock()
    lat, errors, hangups = [], [], [0]
    expected = [0]

    def body(i):
        return json.dumps({"messages": [{"role": "user", "content": f"client {i}: where is the bug?"}],
                           "max_tokens": a.max_tokens, "temperature": 0.7, "seed": i}).encode()

    def timed(fn, i):
        try:
            fn(i)
        except Exception as e:  # noqa: BLE001 -- every failure is counted
            with lock:
                errors.append(f"client {i}: {type(e).__name__}: {e}")

    def note(t0, status, b):
        if status != 200:
            raise RuntimeError(f"status {status}: {b[:200]!r}")
        json.loads(b)
        with lock:
            lat.append(time.time() - t0)

    def keep_alive(i):
        s = socket.create_connection(addr, timeout=a.deadline)
        for _ in range(3):
            t0 = time.time()
            s.sendall(request(body(i)))
            note(t0, *read_response(s))
        s.close()

    def closing(i):
        version = "HTTP/1.0" if i % 2 else "HTTP/1.1"
        s = socket.create_connection(addr, timeout=a.deadline)
        t0 = time.time()
        s.sendall(request(body(i), version, close=version == "HTTP/1.1"))
        note(t0, *read_response(s))
        s.close()

    def slow(i):
        s = socket.create_connection(addr, timeout=a.deadline)
        data = request(body(i))
        t0 = time.time()
        step = max(1, len(data) // 20)
        for k in range(0, len(data), step):
            s.sendall(data[k:k + step])
            time.sleep(0.1)
        note(t0, *read_response(s))
        s.close()

    def hang_up(i):
        s = socket.create_connection(addr, timeout=a.deadline)
        s.sendall(request(json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000}).encode()))
        time.sleep(0.05)
        s.close()
        with lock:
            hangups[0] += 1

    kinds = []
    for i in range(a.clients):
        r = i % 10
        kind = keep_alive if r < 6 else closing if r < 8 else slow if r < 9 else hang_up
        expected[0] += {keep_alive: 3, closing: 1, slow: 1, hang_up: 0}[kind]
        kinds.append(kind)
    t0 = time.time()
    threads = [threading.Thread(target=timed, args=(k, i), daemon=True) for i, k in enumerate(kinds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, a.deadline - (time.time() - t0)))
    wall = time.time() - t0
    status = open(f"/proc/{a.pid}/status").read()
    peak = int(next(l for l in status.splitlines() if l.startswith("VmHWM")).split()[1]) / 1024
    # The server still answers after the load.
    s = socket.create_connection(addr, timeout=10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    alive = read_response(s)[0] == 200
    lat.sort()
    q = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else None
    out = {"clients": a.clients, "expected": expected[0], "answered": len(lat), "errors": len(errors),
           "hung_up": hangups[0], "p50_s": q(0.5), "p99_s": q(0.99), "max_s": round(lat[-1], 3) if lat else None,
           "wall_s": round(wall, 2), "peak_rss_mb": round(peak, 1), "alive_after": alive}
    print(json.dumps(out))
    for e in errors[:10]:
        print(e)
    return 0 if len(lat) == expected[0] and not errors and alive else 1


if __name__ == "__main__":
    raise SystemExit(main())

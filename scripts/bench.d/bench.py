#!/usr/bin/env python3
"""The benchmark harness of issue 11. Run it through `scripts/bench`, which
installs what it needs, builds the binaries and passes their paths here.

It drives the queue-exporter binary as a user would (a config file, `serve`
scraped over HTTP and called over gRPC, `once` as a process), next to its
peers in the same run: redis_exporter `-check-keys` on the same private
redis-server, and RabbitMQ's own endpoints fetched by curl. It writes a
Markdown report (BENCHMARKS.md) with plots, and the raw numbers as JSON.

Only the Python standard library is needed, plus matplotlib for the plots.
"""

import argparse
import base64
import datetime
import gzip
import http.server
import json
import os
import platform
import random
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

RABBIT_API = "http://127.0.0.1:15672"
RABBIT_PROM = "http://127.0.0.1:15692"
RABBIT_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()

# Sizes and durations: the issue's data for a full run, tiny ones for --smoke.
FULL = dict(
    lists=2000, zsets=2000, items=100, other=100_000,
    runs=3, poll_window=30, peer_scrapes=3, once_runs=5, scrape_costs=3, variant_polls=15, churn_settle=35, churn_polls=30, churn_warmup=2.5, floor_runs=20, floor_cadence_runs=15,
    http_seconds=10.0, grpc_seconds=10.0, grpc_maps=1000, proof_seconds=5.0,
    idle_seconds=15.0, push_trials=50,
    mem_queues=10_000, mem_rabbit=5000, mem_sample=0.7,
    growth=[1000, 10_000, 50_000, 200_000], growth_window=20.0,
    rabbit_queues=2000, rabbit_polls=10, curl_runs=5,
    zero_keys=1_000_000, zero_queues=1000, zero_items=10, zero_polls=10, zero_rounds=4,
)
SMOKE = dict(
    lists=20, zsets=20, items=10, other=500,
    runs=1, poll_window=2, peer_scrapes=1, once_runs=1, scrape_costs=1, variant_polls=1, churn_settle=2, churn_polls=2, churn_warmup=0.5, floor_runs=2, floor_cadence_runs=2,
    http_seconds=1.0, grpc_seconds=1.0, grpc_maps=50, proof_seconds=1.0,
    idle_seconds=1.0, push_trials=3,
    mem_queues=100, mem_rabbit=50, mem_sample=0.3,
    growth=[100, 400], growth_window=2.0,
    rabbit_queues=20, rabbit_polls=1, curl_runs=1,
    zero_keys=3000, zero_queues=20, zero_items=2, zero_polls=2, zero_rounds=2,
)

# gRPC clients, each on its own HTTP/2 connection with one request in
# flight. Latency and throughput are tied by Little's law (in flight =
# rate × latency): 20,000/s at p99 ≤ 2 ms leaves room for about 16-30
# requests in flight, so more clients would only queue.
GRPC_CLIENTS = 16

TARGETS = {
    1: "≥ 50× faster",
    2: "≤ 1/15",
    3: "≥ 5× faster",
    4: "p50 ≤ 5 ms, p99 ≤ 20 ms",
    5: "≥ 20,000 req/s, p99 ≤ 2 ms, 0 backend commands",
    6: "p99 ≤ poll_interval + 100 ms (350 ms)",
    7: "RSS ≤ 30 MB and flat",
    8: "linear",
    9: "poll ≤ 1.2× the raw endpoint",
    10: "≤ 1/15 (static, 10 %), ≤ 1/10 (100 %)",
    11: "Redis CPU within 10 % of presets",
}

CHILDREN = []  # processes to stop on exit

# The closed-loop section of BENCHMARKS.md (closedloop.py, `scripts/bench
# --closed-loop`) sits between these marks; a rewrite of the report keeps it.
CLOSED_LOOP_START = "<!-- closed-loop: written by scripts/bench --closed-loop -->"
CLOSED_LOOP_END = "<!-- /closed-loop -->"
GRID_START = "<!-- closed-loop-grid: written by scripts/bench --closed-loop --grid -->"
GRID_END = "<!-- /closed-loop-grid -->"
MEASURED_START = "<!-- closed-loop-measured: written by scripts/bench --closed-loop --measured -->"
MEASURED_END = "<!-- /closed-loop-measured -->"
PLAN_START = "<!-- plan-week: written by scripts/bench --plan -->"
PLAN_END = "<!-- /plan-week -->"
CLEANUPS = []  # callables to run on exit


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spread(values):
    """(min, median, max) of a non-empty list, else None."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    return (v[0], statistics.median(v), v[-1])


def pct(values, p):
    v = sorted(values)
    if not v:
        return None
    k = max(1, min(len(v), int(-(-p * len(v) // 100))))
    return v[k - 1]


def fmt(x, unit="ms"):
    if x is None:
        return "—"
    if unit == "ms":
        if x >= 100:
            return f"{x:,.0f} ms"
        if x >= 10:
            return f"{x:.1f} ms"
        if x >= 1:
            return f"{x:.2f} ms"
        return f"{x:.3f} ms"
    if unit == "MB":
        return f"{x:.1f} MB"
    if unit == "%":
        return f"{x:.2f} %"
    if unit == "rps":
        return f"{x:,.0f}/s"
    return f"{x:g}{unit}"


def fmt3(s, unit="ms"):
    if s is None:
        return "—"
    lo, mid, hi = s
    return f"{fmt(lo, unit)} / **{fmt(mid, unit)}** / {fmt(hi, unit)}"


# ---------------------------------------------------------------- Redis


class Redis:
    """A minimal RESP client for the harness's own admin commands."""

    def __init__(self, port, db=0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""
        if db:
            self.cmd("SELECT", db)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def cmd(self, *args):
        self.sock.sendall(resp(*args))
        return self._reply()

    def commandstats(self):
        """{command: (calls, usec)} from INFO commandstats."""
        out = {}
        for line in self.cmd("INFO", "commandstats").splitlines():
            m = re.match(r"cmdstat_([^:]+):calls=(\d+),usec=(\d+)", line)
            if m:
                out[m.group(1)] = (int(m.group(2)), int(m.group(3)))
        return out

    def cpu(self):
        """Seconds of CPU redis-server has used (user + sys, all threads)."""
        info = dict(
            l.split(":", 1) for l in self.cmd("INFO", "cpu").splitlines() if ":" in l
        )
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def close(self):
        self.sock.close()


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if not isinstance(a, bytes):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def stats_delta(before, after, exclude=("info",)):
    """{command: (calls, usec)} done between two commandstats readings."""
    out = {}
    for name, (calls, usec) in after.items():
        if name in exclude:
            continue
        c0, u0 = before.get(name, (0, 0))
        if calls - c0:
            out[name] = (calls - c0, usec - u0)
    return out


def total(delta):
    return sum(c for c, _ in delta.values()), sum(u for _, u in delta.values())


class RedisServer:
    def __init__(self, workdir):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="redis-", dir=workdir)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir,
             "--databases", "16", "--logfile", os.path.join(self.dir, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        CHILDREN.append(self.proc)
        deadline = time.time() + 20
        while True:
            try:
                Redis(self.port).cmd("PING")
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        self.admin = Redis(self.port)

    def url(self, db=0):
        return f"redis://127.0.0.1:{self.port}/{db}"

    def seed(self, db, commands):
        """Feeds an iterable of RESP byte chunks to `redis-cli --pipe`."""
        p = subprocess.Popen(
            ["redis-cli", "-p", str(self.port), "--pipe"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        p.stdin.write(resp("SELECT", db))
        batch = []
        size = 0
        for c in commands:
            batch.append(c)
            size += len(c)
            if size > 1 << 20:
                p.stdin.write(b"".join(batch))
                batch, size = [], 0
        p.stdin.write(b"".join(batch))
        p.stdin.close()
        out = p.stdout.read().decode(errors="replace")
        p.wait()
        m = re.search(r"errors: (\d+), replies: (\d+)", out)
        if p.returncode != 0 or not m or m.group(1) != "0":
            raise RuntimeError(f"redis-cli --pipe failed: {out}")


def zset_cmd(key, items, now, rng):
    args = [b"ZADD", key]
    for j in range(items):
        args.append(b"%.3f" % (now - rng.random() * 3600))
        args.append(b'{"jid":"%d"}' % j)
    return resp(*args)


def list_cmd(key, items):
    return resp(b"RPUSH", key, *[b'{"class":"Worker","jid":"%d"}' % j for j in range(items)])


# Commands the churn writer sends; never the exporter's.
CHURN_COMMANDS = ("rpush", "lpop", "zadd", "zpopmin")


class Churn:
    """Real work on a share of the main queues, once a second, on its own
    connection and thread: a producer adds a job at *now* and a worker takes
    the *oldest* one. Each chosen list gets an `RPUSH` (at the tail) and an
    `LPOP` (the head: the oldest); each chosen zset a `ZADD` of a new member
    scored now and a `ZPOPMIN` (the oldest). Lengths stay the same, while
    both ends of every chosen queue move, as in a fed and drained queue."""

    def __init__(self, port, lists, zsets, share, seed=5):
        self.redis = Redis(port)
        self.keys = ([(b"l", b"queue:list:%d" % i) for i in range(lists)] +
                     [(b"z", b"queue:zset:%d" % i) for i in range(zsets)])
        self.n = max(1, round(len(self.keys) * share))
        self.rng = random.Random(seed)
        self.stopped = threading.Event()
        self.rounds = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopped.wait(1.0):
            now = time.time()
            cmds = []
            for n, (kind, key) in enumerate(self.rng.sample(self.keys, self.n)):
                if kind == b"l":
                    cmds.append(resp(b"RPUSH", key, b'{"class":"Worker","jid":"c%d"}' % n))
                    cmds.append(resp(b"LPOP", key))
                else:
                    member = b'{"jid":"c%d.%d"}' % (self.rounds, n)
                    cmds.append(resp(b"ZADD", key, b"%.3f" % now, member))
                    cmds.append(resp(b"ZPOPMIN", key))
            self.redis.sock.sendall(b"".join(cmds))
            for _ in cmds:
                self.redis._reply()
            self.rounds += 1

    def stop(self):
        self.stopped.set()
        self.thread.join()
        self.redis.close()


def queues(prefix, start, stop, items, now, rng):
    """Half lists, half timestamp zsets: `{prefix}list:{i}`, `{prefix}zset:{i}`."""
    for i in range(start, stop):
        yield list_cmd(b"%slist:%d" % (prefix, i), items)
        yield zset_cmd(b"%szset:%d" % (prefix, i), items, now, rng)


# ---------------------------------------------------------------- exporter


def http_get(url, headers=None, timeout=60):
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read(), r.headers


def proc_cpu(pid):
    """CPU seconds (user + system) a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sample_rss(exp, seconds, every):
    """The exporter's RSS (MB) every `every` s for `seconds` s."""
    out = []
    end = time.time() + seconds
    while True:
        out.append(exp.rss())
        if time.time() >= end:
            return out
        time.sleep(every)


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def metric(text, name, labels=None):
    """First sample `name{...labels...}` in exposition text."""
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name):]
        if rest[:1] not in ("{", " "):
            continue
        if labels and not all(f'{k}="{v}"' in rest for k, v in labels.items()):
            continue
        try:
            return float(line.rsplit(" ", 1)[1])
        except ValueError:
            continue
    return None


def self_metrics(text):
    """Only the exporter's own lines (queue series are the bulk)."""
    return "\n".join(l for l in text.splitlines() if l.startswith("queue_exporter_"))


class Exporter:
    def __init__(self, binary, workdir, name, body, grpc=True):
        self.http_port = free_port()
        self.grpc_port = free_port() if grpc else None
        self.dir = tempfile.mkdtemp(prefix=f"exp-{name}-", dir=workdir)
        self.config = os.path.join(self.dir, "config.yaml")
        grpc_addr = f"127.0.0.1:{self.grpc_port}" if grpc else "null"
        with open(self.config, "w") as f:
            f.write(f"listen: {{ http: 127.0.0.1:{self.http_port}, grpc: {grpc_addr} }}\n{body}")
        self.stderr_path = os.path.join(self.dir, "stderr")
        self.proc = subprocess.Popen(
            [binary, "--config", self.config],
            stdout=subprocess.DEVNULL, stderr=open(self.stderr_path, "w"),
            env={k: v for k, v in os.environ.items() if k != "RUST_LOG"},
        )
        CHILDREN.append(self.proc)
        self.base = f"http://127.0.0.1:{self.http_port}"
        self.grpc = f"127.0.0.1:{self.grpc_port}" if grpc else None

    def stderr(self):
        with open(self.stderr_path, errors="replace") as f:
            return f.read()[-3000:]

    def wait_ready(self, timeout=600):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exporter exited: {self.stderr()}")
            try:
                status, body, _ = http_get(self.base + "/readyz", timeout=5)
                if status == 200:
                    if b" down" in body:
                        raise RuntimeError(f"a source is down: {body!r}\n{self.stderr()}")
                    return
            except urllib.error.HTTPError:
                pass
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"exporter not ready in {timeout} s: {self.stderr()}")

    def scrape(self):
        """/metrics as Prometheus asks for it (gzip), decompressed."""
        _, body, headers = http_get(self.base + "/metrics", {"Accept-Encoding": "gzip"})
        if headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return body.decode()

    def poll_hist(self, source):
        text = self_metrics(self.scrape())
        s = metric(text, "queue_exporter_poll_duration_seconds_sum", {"source": source})
        c = metric(text, "queue_exporter_poll_duration_seconds_count", {"source": source})
        return (s or 0.0), int(c or 0), text

    def rss(self):
        return rss_mb(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def next_poll_end(exp, source, every, deadline):
    """Reads the poll histogram every `every` seconds until a poll ends;
    returns its `_sum`, `_count` and that poll's duration in seconds (the
    `_sum` increase, exact when one poll ended since the last reading)."""
    s_prev, c_prev, _ = exp.poll_hist(source)
    while True:
        time.sleep(every)
        s, c, _ = exp.poll_hist(source)
        if c > c_prev:
            return s, c, (s - s_prev) / (c - c_prev)
        s_prev, c_prev = s, c
        if time.time() > deadline:
            raise RuntimeError(f"no poll finished: {exp.stderr()}")


def watch_polls(exp, source, polls, redis=None, every=0.25, timeout=None):
    """Steady polls of a running exporter, from its own histogram.

    /metrics (gzip, cached per snapshot) is read every `every` seconds; when
    `_count` went up by exactly one since the last reading, `_sum`'s increase
    is that one poll's duration. Redis's commandstats and CPU are read right
    after the first and the last counted poll, so the window holds whole polls.
    """
    timeout = timeout or (polls * 10 + 60)
    deadline = time.time() + timeout
    # Align on the end of a poll.
    s, c, _ = next_poll_end(exp, source, every, deadline)
    t0 = time.time()
    cs0 = redis.commandstats() if redis else None
    cpu0 = redis.cpu() if redis else None
    c0, s_prev, c_prev = c, s, c
    samples = []
    while c_prev - c0 < polls:
        time.sleep(every)
        s, c, text = exp.poll_hist(source)
        if c == c_prev + 1:
            samples.append((s - s_prev) * 1000)
        s_prev, c_prev = s, c
        if time.time() > deadline:
            raise RuntimeError(f"polls too slow: {c - c0} of {polls}")
    t1 = time.time()
    out = dict(samples_ms=samples, polls=c_prev - c0, seconds=t1 - t0, text=text)
    if redis:
        out["commands"] = stats_delta(cs0, redis.commandstats())
        out["cpu_s"] = redis.cpu() - cpu0
    return out


def discovery_rounds(exp, source):
    """{kind: rounds} the exporter has finished (its own counter)."""
    text = self_metrics(exp.scrape())
    return {kind: int(metric(text, "queue_exporter_discovery_rounds_total",
                             {"source": source, "round": kind}) or 0)
            for kind in ("full", "remembered", "libraries")}


def wait_rounds(exp, source, at_least, redis, timeout=600):
    """Waits until the exporter has finished `at_least` discovery rounds,
    reading every 0.1 s, then reads Redis's commandstats at once (the next
    round starts `discovery_interval` after one finished)."""
    deadline = time.time() + timeout
    while True:
        rounds = discovery_rounds(exp, source)
        if sum(rounds.values()) >= at_least:
            return rounds, redis.commandstats()
        if time.time() > deadline:
            raise RuntimeError(f"{at_least} discovery rounds not finished: {rounds}")
        time.sleep(0.1)


def scrape_costs(exp, source, n):
    """What one scrape costs the exporter: the first GET of a new snapshot
    (encoded, and for gzip compressed, then cached) and a repeated GET of the
    same snapshot. A new snapshot is detected by GETs every 50 ms, in the
    format being measured; the GET that first shows the new poll count is
    the first of its snapshot."""
    out = {"plain": ([], []), "gzip": ([], [])}
    size = {}
    for kind in ["plain", "gzip"] * n:
        headers = {"Accept-Encoding": "gzip" if kind == "gzip" else "identity"}
        url = exp.base + "/metrics"

        def get():
            t = time.perf_counter()
            _, body, h = http_get(url, headers)
            ms = (time.perf_counter() - t) * 1000
            text = gzip.decompress(body) if h.get("Content-Encoding") == "gzip" else body
            m = re.search(r'queue_exporter_poll_duration_seconds_count\{source="%s"\} (\d+)'
                          % re.escape(source), text.decode(errors="replace"))
            return ms, (m.group(1) if m else None), len(body)

        _, count, _ = get()
        deadline = time.time() + (30 if count is not None else 0)
        while time.time() < deadline:
            time.sleep(0.05)
            ms, c, n_bytes = get()
            if c != count:
                again, _, _ = get()
                out[kind][0].append(ms)
                out[kind][1].append(again)
                size[kind] = n_bytes
                break
    return {k: dict(first_ms=f, again_ms=a, bytes=size.get(k)) for k, (f, a) in out.items()}


# The longest any one loadgen run may take (the 200k-key seed is the slowest).
LOADGEN_TIMEOUT_S = 1200
# The longest a `once` may take.
ONCE_TIMEOUT_S = 300


def loadgen(args, *cmd, server=None):
    """Runs a loadgen subcommand; adds the CPU seconds it used (client_cpu_s)
    and, given the server's pid, the CPU seconds the server used meanwhile."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s0 = proc_cpu(server) if server else None
    # A deadline, so a blocked broker (a RabbitMQ disk or memory alarm holds
    # publishers forever) fails the scenario instead of stalling the run.
    out = subprocess.run([args.loadgen, *map(str, cmd)], capture_output=True, text=True,
                         timeout=LOADGEN_TIMEOUT_S)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"loadgen {cmd[0]} failed: {out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["client_cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if server:
        res["server_cpu_s"] = proc_cpu(server) - s0
    return res


# ---------------------------------------------------------------- RabbitMQ


def rabbit(method, path, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        RABBIT_API + "/api" + path, data=data, method=method,
        headers={"Authorization": RABBIT_AUTH, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw.strip() else None)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def rabbit_available():
    try:
        status, body = rabbit("GET", "/overview", timeout=5)
        return body.get("rabbitmq_version") if status == 200 else None
    except (OSError, AttributeError):
        return None


class Vhost:
    """A throw-away vhost, deleted at exit."""

    def __init__(self, tag):
        self.name = f"qe-bench-{tag}-{os.getpid()}"
        self.enc = urllib.parse.quote(self.name, safe="")
        rabbit("DELETE", f"/vhosts/{self.enc}")
        status, body = rabbit("PUT", f"/vhosts/{self.enc}")
        if status >= 300:
            raise RuntimeError(f"create vhost: {status} {body}")
        rabbit("PUT", f"/permissions/{self.enc}/guest",
               {"configure": ".*", "write": ".*", "read": ".*"})
        CLEANUPS.append(self.delete)

    def amqp(self):
        return f"amqp://guest:guest@127.0.0.1:5672/{self.enc}"

    def delete(self):
        """Deletes the vhost and waits until it is gone: deleting thousands of
        queues keeps RabbitMQ busy, and the next scenario must not measure
        that."""
        try:
            rabbit("DELETE", f"/vhosts/{self.enc}", timeout=300)
        except OSError as e:
            log(f"deleting vhost {self.name}: {e}")
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                if rabbit("GET", f"/vhosts/{self.enc}", timeout=30)[0] == 404:
                    return
            except OSError:
                pass
            time.sleep(1)
        log(f"vhost {self.name} still there after 300 s")

    def wait_stats(self, queues, timeout=180):
        """Until the management stats have every queue with its message."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, body = rabbit("GET", f"/vhosts/{self.enc}")
            if status == 200 and isinstance(body, dict):
                published = (body.get("message_stats") or {}).get("publish", 0)
                if body.get("messages") == queues and published >= queues:
                    return
            time.sleep(1)
        raise RuntimeError(f"RabbitMQ stats for {self.name} not ready")


class LoggingProxy:
    """A reverse proxy that records the paths a client GETs, to learn the
    exact requests a method makes (they are then fetched by curl)."""

    def __init__(self, upstream):
        paths = self.paths = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                paths.append(self.path)
                req = urllib.request.Request(upstream + self.path, headers={
                    k: v for k, v in self.headers.items()
                    if k.lower() in ("authorization", "accept")})
                try:
                    with urllib.request.urlopen(req, timeout=120) as r:
                        status, body = r.status, r.read()
                        ctype = r.headers.get("Content-Type", "application/json")
                except urllib.error.HTTPError as e:
                    status, body, ctype = e.code, e.read(), "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# The exporter's poll_interval in the RabbitMQ scenario: raw rounds are
# spaced by it, so RabbitMQ is as warm for curl as it is for the exporter.
POLL_GAP_S = 1.0


def curl_times(urls, auth=True):
    """One curl process GETs `urls` in order on one connection; returns the
    total time (ms) and bytes, from curl's own timers."""
    cmd = ["curl", "-s", "--max-time", "120", "-w", "%{time_total} %{size_download} %{http_code}\\n"]
    if auth:
        cmd += ["-u", "guest:guest"]
    for u in urls:
        cmd += ["-o", "/dev/null", u]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    ms, size = 0.0, 0
    for line in out.strip().splitlines():
        t, n, code = line.split()
        if code != "200":
            raise RuntimeError(f"curl got {code}")
        ms += float(t) * 1000
        size += int(n)
    return ms, size


class Background:
    """A function run on a thread; `result()` joins it and re-raises."""

    def __init__(self, fn):
        self.value, self.error = None, None

        def run():
            try:
                self.value = fn()
            except Exception as e:  # noqa: BLE001 - handed to result()
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def result(self, timeout=600):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise RuntimeError("background measurement did not finish")
        if self.error:
            raise self.error
        return self.value


def raw_between_polls(exp, source, urls, rounds, est_ms):
    """`rounds` curl rounds of `urls`, one per poll interval, each centred in
    the idle time between two of the running exporter's polls (found from
    its poll histogram, read every 20 ms)."""
    _, _, poll_s = next_poll_end(exp, source, 0.02, time.time() + 60)
    ended = time.time()
    start = ended + max(0.0, (POLL_GAP_S - poll_s - est_ms / 1000) / 2)
    out = []
    for k in range(rounds):
        wait = start + k * POLL_GAP_S - time.time()
        if wait > 0:
            time.sleep(wait)
        out.append(curl_times(urls))
    return out


# ---------------------------------------------------------------- scenarios


class Bench:
    def __init__(self, args):
        self.args = args
        self.p = SMOKE if args.smoke else FULL
        self.work = tempfile.mkdtemp(prefix="qe-bench-")
        self.results = {}
        self.notes = []
        self.failed = []
        self.redis_version = ""
        self.peer_version = None
        self.rabbit_version = None
        self.rng = random.Random(11)

    # ---- data

    def seed_main(self):
        p = self.p
        r = self.redis
        now = time.time()
        t = time.time()

        def gen():
            for i in range(p["other"]):
                yield resp(b"SET", b"cache:%d" % i, b"v")
            for i in range(p["lists"]):
                yield list_cmd(b"queue:list:%d" % i, p["items"])
            for i in range(p["zsets"]):
                yield zset_cmd(b"queue:zset:%d" % i, p["items"], now, self.rng)

        r.seed(0, gen())
        enc = r.admin.cmd("OBJECT", "ENCODING", "queue:zset:0")
        log(f"seeded db 0: {r.admin.cmd('DBSIZE')} keys in {time.time() - t:.1f} s (zset encoding {enc})")
        self.zset_encoding = enc

    def main_config(self, poll="1s", extra_queues="", source_extra=""):
        return (
            "sources:\n"
            "  - name: bench\n"
            "    type: redis\n"
            f"    url: {self.redis.url(0)}\n"
            f"    poll_interval: {poll}\n"
            f"{source_extra}"
            "    queues:\n"
            "      - pattern: \"queue:list:*\"\n"
            "      - pattern: \"queue:zset:*\"\n"
            "        score: timestamp\n"
            f"{extra_queues}"
        )

    def start_exporter(self, name, body, grpc=True):
        exp = Exporter(self.args.bin, self.work, name, body, grpc)
        CLEANUPS.append(exp.stop)
        exp.wait_ready()
        return exp

    # ---- peer: redis_exporter

    def start_peer(self):
        binary = shutil.which("prometheus-redis-exporter") or shutil.which("redis_exporter")
        if not binary:
            self.notes.append("redis_exporter is not installed: peer rows are empty.")
            return None
        port = free_port()
        proc = subprocess.Popen(
            [binary, "-redis.addr", self.redis.url(0), "-web.listen-address", f"127.0.0.1:{port}",
             "-check-keys", "queue:list:*,queue:zset:*"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        CHILDREN.append(proc)
        url = f"http://127.0.0.1:{port}/metrics"
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read()
                break
            except OSError:
                time.sleep(0.05)
        ver = subprocess.run([binary, "-version"], capture_output=True, text=True)
        m = re.search(r"Redis Metrics Exporter (\S+)", ver.stdout + ver.stderr)
        self.peer_version = f"redis_exporter {m.group(1) if m else '(unknown version)'}"
        return dict(proc=proc, url=url)

    def peer_scrapes(self, peer, n, writer=False):
        """n scrapes, timed; Redis commandstats and CPU per scrape (without
        the churn writer's commands when one is running)."""
        a = self.redis.admin
        out = []
        for _ in range(n):
            cs0, cpu0 = a.commandstats(), a.cpu()
            t = time.perf_counter()
            _, body, _ = http_get(peer["url"], timeout=300)
            ms = (time.perf_counter() - t) * 1000
            cpu = a.cpu() - cpu0
            delta = stats_delta(cs0, a.commandstats(),
                                exclude=("info",) + CHURN_COMMANDS if writer else ())
            calls, usec = total(delta)
            keys = sum(1 for l in body.decode(errors="replace").splitlines()
                       if l.startswith("redis_key_size{"))
            out.append(dict(ms=ms, calls=calls, usec=usec, cpu_ms=cpu * 1000, keys=keys,
                            commands=delta))
        return out

    # ---- scenarios 1, 2, 4, 5: one exporter per run

    def idle_cpu(self):
        a = self.redis.admin
        secs = self.p["idle_seconds"]
        c0, t0 = a.cpu(), time.time()
        time.sleep(secs)
        rate = (a.cpu() - c0) / (time.time() - t0)
        self.results["redis_idle_cpu_pct"] = rate * 100
        log(f"idle Redis CPU {rate * 100:.2f} %")
        return rate

    def run_main(self):
        p = self.p
        a = self.redis.admin
        peer = self.start_peer() if not self.args.no_peer else None
        idle = self.idle_cpu()
        runs = []
        peer_runs = []
        for r in range(p["runs"]):
            if peer:
                log(f"run {r + 1}: redis_exporter scrapes")
                peer_runs += self.peer_scrapes(peer, p["peer_scrapes"])
            log(f"run {r + 1}: queue-exporter serve, {p['poll_window']} steady polls")
            exp = self.start_exporter(f"main{r}", self.main_config())
            s1, c1, _ = exp.poll_hist("bench")
            first = s1 * 1000 if c1 == 1 else None
            w = watch_polls(exp, "bench", p["poll_window"], a)
            tracked = metric(w["text"], "queue_exporter_tracked_keys", {"source": "bench"})
            run = dict(polls=w["samples_ms"], window_polls=w["polls"], window_s=w["seconds"],
                       first_poll_ms=first, scrape=scrape_costs(exp, "bench", p["scrape_costs"]),
                       commands=w["commands"], cpu_s=w["cpu_s"], tracked=tracked,
                       rss_mb=exp.rss())
            log(f"  median poll {statistics.median(w['samples_ms']):.1f} ms, "
                f"{total(w['commands'])[1] / w['polls'] / 1000:.1f} ms Redis/poll, tracked {tracked}")
            # 4: /metrics under 10 concurrent scrapers.
            run["http"] = {}
            for gz in (False, True):
                flag = ["--gzip"] if gz else []
                res = loadgen(self.args, "http", "--url", exp.base + "/metrics",
                              "--concurrency", 10, "--seconds", p["http_seconds"], *flag,
                              server=exp.proc.pid)
                run["http"]["gzip" if gz else "plain"] = res
                log(f"  /metrics {'gzip' if gz else 'plain'}: p50 {res['latency']['p50_ms']:.2f} ms "
                    f"p99 {res['latency']['p99_ms']:.2f} ms, {res['rps']:.0f}/s")
            # 5: gRPC GetMetrics under load, polls running.
            s0, c0, _ = exp.poll_hist("bench")
            cs0 = a.commandstats()
            res = loadgen(self.args, "grpc", "--addr", exp.grpc, "--lists", p["lists"],
                          "--zsets", p["zsets"], "--maps", p["grpc_maps"],
                          "--connections", GRPC_CLIENTS, "--concurrency", GRPC_CLIENTS,
                          "--seconds", p["grpc_seconds"], server=exp.proc.pid)
            delta = stats_delta(cs0, a.commandstats())
            _, c1, _ = exp.poll_hist("bench")
            res["window_polls"] = c1 - c0
            res["window_commands"] = delta
            run["grpc"] = res
            log(f"  gRPC: {res['rps']:.0f}/s p99 {res['latency']['p99_ms']:.2f} ms, errors {res['errors']}")
            exp.stop()
            runs.append(run)
        if peer:
            peer["proc"].terminate()
            peer["proc"].wait()
        # The floor: the same size commands from a bare pipelined client.
        a0 = a.commandstats()
        fl = loadgen(self.args, "floor", "--redis", self.redis.url(0), "--lists", p["lists"],
                     "--zsets", p["zsets"], "--runs", p["floor_runs"])
        fl["redis_ms"] = total(stats_delta(a0, a.commandstats()))[1] / p["floor_runs"] / 1000
        self.results["floor"] = fl
        # The same at the poll cadence (one round a second, so Redis's
        # caches are as cold for each round as for each poll), for the bare
        # minimum and for every read the default values need.
        for key, extra in (("floor_cadence", []), ("floor_needed", ["--needed"])):
            self.results[key] = self.floor_at_cadence(key, *extra)
        self.results["main"] = dict(runs=runs, peer=peer_runs, idle_cpu=idle)
        self.grpc_proof()
        self.variants()

    def floor_at_cadence(self, what, *extra, exclude=("info",)):
        """`loadgen floor` one round a second, as polls come (so Redis's
        caches are as cold for each round as for each poll), with its Redis
        CPU per round and commands (`exclude`d ones left out)."""
        p = self.p
        a = self.redis.admin
        a0 = a.commandstats()
        f = loadgen(self.args, "floor", "--redis", self.redis.url(0), "--lists", p["lists"],
                    "--zsets", p["zsets"], "--runs", p["floor_cadence_runs"],
                    "--gap-ms", 1000, *extra)
        delta = stats_delta(a0, a.commandstats(), exclude=exclude)
        f["redis_ms"] = total(delta)[1] / p["floor_cadence_runs"] / 1000
        f["commands_delta"] = delta
        log(f"  {what}: Redis {f['redis_ms']:.2f} ms per round")
        return f

    def variants(self):
        """Not targets: the same steady polls with other settings, to show
        what the histogram and `client_tracking` cost and save on static
        data (queues under real work are scenario 10)."""
        p = self.p
        untracked = "    client_tracking: false\n"
        plans = (
            ("age_histogram_interval: 0s", "histogram on every poll",
             "    age_histogram_interval: 0s\n", 0),
            ("age_buckets: []", "no histogram", "    age_buckets: []\n", 0),
            ("client_tracking: false", "every key read on every poll", untracked, 0),
        )
        out = [self.steady_row(config, what, extra, share, p["variant_polls"])
               for config, what, extra, share in plans]
        self.results["variants"] = out

    def steady_row(self, config, what, extra, share, polls, settle=0):
        """Steady polls of a fresh exporter with `extra` config while a
        `Churn` writer works `share` of the queues (none at 0): after
        `settle` polls, `polls` polls are watched; the exporter's own
        commands and CPU, and the writer's commands, over whole polls."""
        exp = self.start_exporter("row", self.main_config(source_extra=extra))
        writer = Churn(self.redis.port, self.p["lists"], self.p["zsets"], share) if share else None
        try:
            if writer:
                time.sleep(self.p["churn_warmup"])  # the writer's first rounds, before the window
            deadline = time.time() + settle * 5 + 60
            while exp.poll_hist("bench")[1] < settle:
                if time.time() > deadline:
                    raise RuntimeError(f"{config} ({what}): polls too slow")
                time.sleep(0.5)
            cpu0 = proc_cpu(exp.proc.pid)
            w = watch_polls(exp, "bench", polls, self.redis.admin)
            exporter_cpu_s = proc_cpu(exp.proc.pid) - cpu0
        finally:
            if writer:
                writer.stop()
            exp.stop()
        ours = {k: v for k, v in w["commands"].items() if k not in CHURN_COMMANDS}
        writes = {k: v for k, v in w["commands"].items() if k in CHURN_COMMANDS}
        text = self_metrics(w["text"])
        row = dict(name=f"{config} ({what})", config=config, what=what, share=share,
                   polls=w["samples_ms"], window_polls=w["polls"], commands=ours,
                   exporter_cpu_ms=exporter_cpu_s * 1000 / max(1, w["polls"]),
                   writes=writes, cpu_s=w["cpu_s"], seconds=w["seconds"],
                   unchanged=metric(text, "queue_exporter_unchanged_keys", {"source": "bench"}),
                   histogram_staleness=metric(text, "queue_exporter_message_age_staleness_seconds",
                                              {"source": "bench"}))
        log(f"  {config} ({what}): median poll {statistics.median(w['samples_ms']):.1f} ms, "
            f"Redis {total(ours)[1] / w['polls'] / 1000:.2f} ms/poll")
        return row

    # ---- 10: queues under real work

    def run_churn(self):
        """Issue 28: the exporter's Redis CPU per poll while producers push
        at now and workers take the oldest, on a share of the queues each
        second, against redis_exporter's per scrape under the same writes in
        the same run. Each row settles past one `age_histogram_interval`
        (15 s, so histograms are measured on their steady schedule), then
        watches polls spanning a whole `discovery_interval` (30 s), so its
        SCAN counts as much as in steady state. It settles 35 polls: at 100 %
        `client_tracking` pauses itself after 30 polls that spared fewer than
        10 % of the keys, its steady state."""
        p = self.p
        peer = self.start_peer() if not self.args.no_peer else None
        untracked = "    client_tracking: false\n"
        plans = (
            ("default", "static: nothing written", "", 0.0),
            ("default", "10 % of the queues fed and consumed each second", "", 0.1),
            ("default", "every queue fed and consumed each second", "", 1.0),
            ("client_tracking: false", "every queue fed and consumed each second", untracked, 1.0),
        )
        if self.args.smoke:
            plans = plans[::2]  # static and 100 %: the harness runs, quickly
        rows = []
        try:
            for config, what, extra, share in plans:
                scrapes = []
                if peer:
                    writer = Churn(self.redis.port, p["lists"], p["zsets"], share) if share else None
                    try:
                        time.sleep(p["churn_warmup"] if writer else 0)
                        scrapes = self.peer_scrapes(peer, p["peer_scrapes"], writer=bool(writer))
                    finally:
                        if writer:
                            writer.stop()
                row = self.steady_row(config, what, extra, share, p["churn_polls"],
                                      settle=p["churn_settle"])
                row["peer"] = scrapes
                rows.append(row)
            # The floor: the reads the default values need for every key
            # (what a poll reads when every queue changed each second), from
            # a bare pipelined client at the poll cadence, on the same data,
            # while the writer works every queue as in the 100 % rows (its
            # writes move the zsets in memory, so reads find colder caches).
            writer = Churn(self.redis.port, p["lists"], p["zsets"], 1.0)
            try:
                time.sleep(p["churn_warmup"])
                self.results["churn_floor"] = self.floor_at_cadence(
                    "floor of the needed reads, under the writes", "--needed",
                    exclude=("info",) + CHURN_COMMANDS)
            finally:
                writer.stop()
        finally:
            if peer:
                peer["proc"].terminate()
                peer["proc"].wait()
            self.results["churn"] = rows
            # The writes aged and replaced the seeded queues: seed them again
            # for the scenarios that follow.
            self.redis.admin.cmd("FLUSHDB")
            self.seed_main()

    def grpc_proof(self):
        """5, the zero: with polls paused (poll_interval: 1h) Redis sees no
        command at all while the scaler answers."""
        p = self.p
        a = self.redis.admin
        exp = self.start_exporter("grpc-proof", self.main_config(poll="1h"))
        time.sleep(0.5)
        cs0 = a.commandstats()
        res = loadgen(self.args, "grpc", "--addr", exp.grpc, "--lists", p["lists"],
                      "--zsets", p["zsets"], "--maps", p["grpc_maps"],
                      "--connections", GRPC_CLIENTS, "--concurrency", GRPC_CLIENTS,
                      "--seconds", p["proof_seconds"], server=exp.proc.pid)
        res["commands"] = stats_delta(cs0, a.commandstats())
        exp.stop()
        self.results["grpc_proof"] = res
        log(f"  gRPC with polls paused: {res['requests']} requests, Redis commands {total(res['commands'])[0]}")

    # ---- 3: once

    def run_once(self):
        p = self.p
        a = self.redis.admin
        cfg = os.path.join(self.work, "once.yaml")
        with open(cfg, "w") as f:
            f.write("listen: { grpc: null }\n" + self.main_config())
        def once(*flags):
            cs0 = a.commandstats()
            t = time.perf_counter()
            out = subprocess.run([self.args.bin, "once", *flags, "--config", cfg],
                                 capture_output=True, timeout=ONCE_TIMEOUT_S)
            ms = (time.perf_counter() - t) * 1000
            if out.returncode != 0:
                raise RuntimeError(f"once failed: {out.stderr.decode()[-2000:]}")
            calls, usec = total(stats_delta(cs0, a.commandstats()))
            return dict(ms=ms, bytes=len(out.stdout), calls=calls, usec=usec)

        runs = [once() for _ in range(p["once_runs"])]
        self.results["once"] = runs
        # The same with every age histogram measured too (`--histograms`).
        self.results["once_histograms"] = [once("--histograms") for _ in range(p["once_runs"])]
        log(f"once: median {statistics.median(r['ms'] for r in runs):.0f} ms")

    # ---- 6: push latency

    def run_push(self):
        p = self.p
        exp = self.start_exporter("push", self.main_config(
            poll="250ms", extra_queues="      - key: push:q\n"))
        res = loadgen(self.args, "push", "--addr", exp.grpc, "--redis", self.redis.url(0),
                      "--key", "push:q", "--trials", p["push_trials"], "--poll-ms", 250)
        exp.stop()
        self.results["push"] = res
        log(f"push: p50 {res['latency']['p50_ms']:.0f} ms p99 {res['latency']['p99_ms']:.0f} ms, missed {res['missed']}")

    # ---- 7: memory over time

    def rss_series(self, exp, duration):
        """RSS every mem_sample s for `duration` s; a gzip scrape every 15 s
        (as Prometheus would)."""
        samples = []
        t0 = time.time()
        next_scrape = t0
        while True:
            now = time.time()
            if now >= next_scrape:
                exp.scrape()
                next_scrape += 15
            samples.append((now - t0, exp.rss()))
            if now - t0 >= duration:
                break
            time.sleep(min(self.p["mem_sample"], max(0.0, duration - (time.time() - t0))))
        text = self_metrics(exp.scrape())
        return samples, text

    def run_memory_redis(self):
        p = self.p
        n = p["mem_queues"] // 2
        t = time.time()
        self.redis.seed(1, queues(b"mem:", 0, n, p["items"], time.time(), self.rng))
        log(f"seeded db 1: {2 * n} queues in {time.time() - t:.1f} s")
        body = (
            "sources:\n  - name: mem\n    type: redis\n"
            f"    url: {self.redis.url(1)}\n    poll_interval: 1s\n"
            "    queues:\n      - pattern: \"mem:list:*\"\n"
            "      - pattern: \"mem:zset:*\"\n        score: timestamp\n"
        )
        exp = self.start_exporter("mem-redis", body, grpc=True)
        samples, text = self.rss_series(exp, self.args.mem_duration)
        exp.stop()
        self.results["mem_redis"] = dict(
            queues=2 * n, samples=samples,
            tracked=metric(text, "queue_exporter_tracked_keys", {"source": "mem"}),
            polls=metric(text, "queue_exporter_poll_duration_seconds_count", {"source": "mem"}))
        log(f"memory, Redis {2 * n} queues: RSS {samples[0][1]:.1f} → {samples[-1][1]:.1f} MB")
        self.redis.admin.cmd("SELECT", 1)
        self.redis.admin.cmd("FLUSHDB")
        self.redis.admin.cmd("SELECT", 0)

    def run_memory_rabbit(self):
        p = self.p
        n = p["mem_rabbit"]
        vh = Vhost("mem")
        seed = loadgen(self.args, "rabbit-seed", "--amqp", vh.amqp(), "--prefix", "mem.",
                       "--count", n, "--messages", 1)
        log(f"seeded vhost {vh.name}: {n} queues in {seed['seconds']:.1f} s")
        if not self.args.smoke:
            vh.wait_stats(n)
        body = (
            "sources:\n  - name: rabbit\n    type: rabbitmq\n    method: management\n"
            f"    url: {RABBIT_API}\n    username: guest\n    password: guest\n"
            f"    vhosts: [\"{vh.name}\"]\n    poll_interval: 1s\n    timeout: 30s\n"
        )
        exp = self.start_exporter("mem-rabbit", body, grpc=True)
        samples, text = self.rss_series(exp, self.args.mem_duration)
        exp.stop()
        self.results["mem_rabbit"] = dict(
            queues=n, samples=samples,
            seen=metric(text, "queue_exporter_rabbitmq_queues", {"source": "rabbit"}),
            polls=metric(text, "queue_exporter_poll_duration_seconds_count", {"source": "rabbit"}))
        log(f"memory, RabbitMQ {n} queues: RSS {samples[0][1]:.1f} → {samples[-1][1]:.1f} MB")
        vh.delete()

    # ---- 8: growth

    def run_growth(self):
        p = self.p
        a = self.redis.admin
        have = 0
        points = []
        for n in p["growth"]:
            half = n // 2
            t = time.time()
            self.redis.seed(2, queues(b"grow:", have, half, p["items"], time.time(), self.rng))
            have = half
            log(f"growth: seeded {n} queue keys in db 2 ({time.time() - t:.1f} s)")
            body = (
                "sources:\n  - name: grow\n    type: redis\n"
                f"    url: {self.redis.url(2)}\n    poll_interval: 1s\n"
                "    discovery_interval: 1h\n    max_keys: 1000000\n    timeout: 60s\n"
                "    client_tracking: false\n"
                "    queues:\n      - pattern: \"grow:list:*\"\n"
                "      - pattern: \"grow:zset:*\"\n        score: timestamp\n"
            )
            cfg = os.path.join(self.work, f"grow-{n}.yaml")
            with open(cfg, "w") as f:
                f.write("listen: { grpc: null }\n" + body)
            cs0 = a.commandstats()
            t = time.perf_counter()
            out = subprocess.run([self.args.bin, "once", "--config", cfg], timeout=ONCE_TIMEOUT_S,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            once_ms = (time.perf_counter() - t) * 1000
            once_usec = total(stats_delta(cs0, a.commandstats()))[1]
            if out.returncode != 0:
                raise RuntimeError(f"once failed: {out.stderr.decode()[-2000:]}")
            exp = self.start_exporter(f"grow{n}", body, grpc=False)
            # Window: whole polls after the first (discovery) one; /metrics
            # is read only at the window's ends (the body grows with n).
            s0, c0, _ = exp.poll_hist("grow")
            cs0, cpu0, t0 = a.commandstats(), a.cpu(), time.time()
            # RSS through the window, every 70 ms: a poll builds its list
            # while the published one is still served, so the peak (what a
            # memory limit must allow) is inside polls, which take a larger
            # share of each second as keys grow. One reading per size would
            # catch the peak at some sizes and not at others.
            rss = sample_rss(exp, p["growth_window"], 0.07)
            while True:
                s1, c1, text = exp.poll_hist("grow")
                if c1 - c0 >= 3:
                    break
                rss += sample_rss(exp, 1.0, 0.07)
            delta = stats_delta(cs0, a.commandstats())
            cpu = a.cpu() - cpu0
            polls = c1 - c0
            # Redis's counters are read at arbitrary moments (reading
            # /metrics at each poll's end would cost too much here), so they
            # are divided by the polls Redis saw: each poll sends one LLEN
            # per list.
            seen = delta.get("llen", (0, 0))[0] / half or polls
            pt = dict(keys=n, polls=polls, redis_polls=seen, poll_ms=(s1 - s0) / polls * 1000,
                      redis_ms=total(delta)[1] / seen / 1000,
                      redis_cpu_ms=cpu / seen * 1000,
                      calls=total(delta)[0] / seen,
                      rss_mb=max(rss), rss_median_mb=statistics.median(rss),
                      once_ms=once_ms, once_redis_ms=once_usec / 1000,
                      tracked=metric(self_metrics(text), "queue_exporter_tracked_keys", {"source": "grow"}),
                      commands={k: (c / seen, u / seen) for k, (c, u) in delta.items()})
            exp.stop()
            points.append(pt)
            log(f"  {n}: poll {pt['poll_ms']:.1f} ms, Redis {pt['redis_ms']:.1f} ms/poll, "
                f"RSS peak {pt['rss_mb']:.1f} MB (median {pt['rss_median_mb']:.1f}), "
                f"once {once_ms:.0f} ms")
        self.results["growth"] = points
        a.cmd("SELECT", 2)
        a.cmd("FLUSHDB")
        a.cmd("SELECT", 0)

    # ---- 11: zero config vs the same queues as presets

    def seed_zero(self, db):
        """`zero_queues` library queues, a fifth each of RQ, Sidekiq, BullMQ,
        asynq and Celery, laid out as the libraries write them (registries,
        lists, the job hash a latency read needs, BullMQ's `meta` and
        `events`, a Celery priority list), among string keys up to
        `zero_keys`."""
        p = self.p
        n = p["zero_queues"] // 5
        items = p["zero_items"]
        now = time.time()
        iso = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(now - 60)).encode()
        ms = b"%d" % int((now - 60) * 1000)
        ns = b"%d" % int((now - 60) * 1e9)
        job = b'{"class":"Worker","enqueued_at":%.3f}' % (now - 60)

        def gen():
            for i in range(n):
                ids = [b"%d" % j for j in range(items)]
                yield resp(b"SADD", b"rq:queues", b"rq:queue:rq%d" % i)
                yield resp(b"RPUSH", b"rq:queue:rq%d" % i, *[b"rq%d-%s" % (i, j) for j in ids])
                yield resp(b"HSET", b"rq:job:rq%d-0" % i, b"enqueued_at", iso)
                yield resp(b"SADD", b"queues", b"sk%d" % i)
                yield resp(b"LPUSH", b"queue:sk%d" % i, *[job] * items)
                yield resp(b"HSET", b"bull:b%d:meta" % i, b"opts.maxLenEvents", b"10000",
                           b"version", b"bullmq:6.7.0")
                yield resp(b"LPUSH", b"bull:b%d:wait" % i, *ids)
                yield resp(b"HSET", b"bull:b%d:0" % i, b"timestamp", ms)
                yield resp(b"XADD", b"bull:b%d:events" % i, b"*", b"event", b"added")
                yield resp(b"SADD", b"asynq:queues", b"a%d" % i)
                yield resp(b"LPUSH", b"asynq:{a%d}:pending" % i, *[b"a%d-%s" % (i, j) for j in ids])
                yield resp(b"HSET", b"asynq:{a%d}:t:a%d-0" % (i, i), b"pending_since", ns)
                yield resp(b"SADD", b"_kombu.binding.celery", b"c%d\x06\x16\x06\x16c%d" % (i, i))
                yield resp(b"LPUSH", b"c%d" % i, *[b"m"] * items)
                yield resp(b"LPUSH", b"c%d\x06\x163" % i, b"m")
            written = 4 + n * 12
            for j in range(max(0, p["zero_keys"] - written)):
                yield resp(b"SET", b"cache:%d" % j, b"v")

        t = time.time()
        self.redis.seed(db, gen())
        a = self.redis.admin
        a.cmd("SELECT", db)
        keys = a.cmd("DBSIZE")
        a.cmd("SELECT", 0)
        log(f"zero config: seeded db {db}: {keys:,} keys, {n * 5} library queues "
            f"in {time.time() - t:.1f} s")
        return keys, n

    def run_zero(self):
        p = self.p
        a = self.redis.admin
        db = 3
        keys, n = self.seed_zero(db)
        celery = ", ".join(f"c{i}" for i in range(n))
        head = (
            "sources:\n  - name: main\n    type: redis\n"
            f"    url: {self.redis.url(db)}\n    poll_interval: 1s\n"
            "    discovery_interval: 1h\n    max_keys: 100000\n    timeout: 60s\n"
            "    client_tracking: false\n"
        )
        presets = ("    queues:\n      - preset: rq\n      - preset: sidekiq\n"
                   "      - preset: bullmq\n      - preset: asynq\n"
                   f"      - preset: celery\n        queues: [{celery}]\n")
        configs = [
            ("zero config (no `queues:`)", head),
            ("the same queues as presets", head + presets),
            ("presets + `pattern: \"*\"` (list, zset, stream)",
             head + presets + "      - pattern: \"*\"\n        types: [list, zset, stream]\n"),
            # Zero config recognising the libraries alone: one SCAN pass,
            # as the presets make (docs/presets.md, "What zero config costs").
            ("zero config, libraries only (`plain_keys: false`)",
             head + "    plain_keys: false\n"),
            # Measured in later rounds alone: the scans the default makes
            # every `keyspace_scan_interval` (5 minutes at this size), here
            # at every round.
            ("zero config, a scan at every round (`keyspace_scan_interval: 0s`)",
             head + "    keyspace_scan_interval: 0s\n"),
        ]
        rounds_only = {4}
        # Bounded discovery reads sets by `SCARD` + `SSCAN` pages (issue 36).
        discovery_cmds = ("scan", "smembers", "sscan", "scard", "hmget", "type")
        rows, files = [], []
        for i, (label, body) in enumerate(configs):
            cfg = os.path.join(self.work, f"zero-{i}.yaml")
            with open(cfg, "w") as f:
                f.write("listen: { grpc: null }\n" + body)
            files.append(cfg)
            rows.append(dict(config=label, once_ms=[], discovery_ms=[], first_poll_ms=[],
                             once_cpu_ms=[], discovery_calls=[], poll_redis_ms=[], poll_cpu_ms=[],
                             poll_calls=[], poll_ms=[]))
        outputs = [None] * len(configs)
        # `once` of each config in turn, `runs` times, so the configs share
        # the machine's load (2 shared cores) alike.
        for _ in range(p["runs"]):
            for i, cfg in enumerate(files):
                if i in rounds_only:
                    continue
                row = rows[i]
                cs0, cpu0 = a.commandstats(), a.cpu()
                t = time.perf_counter()
                out = subprocess.run([self.args.bin, "once", "--config", cfg],
                                     timeout=ONCE_TIMEOUT_S, capture_output=True)
                row["once_ms"].append((time.perf_counter() - t) * 1000)
                row["once_cpu_ms"].append((a.cpu() - cpu0) * 1000)
                delta = stats_delta(cs0, a.commandstats())
                if out.returncode != 0:
                    raise RuntimeError(f"once ({row['config']}) failed: "
                                       f"{out.stderr.decode()[-2000:]}")
                disc = {k: v for k, v in delta.items() if k.split("|")[0] in discovery_cmds}
                rest = {k: v for k, v in delta.items() if k not in disc}
                row["discovery_ms"].append(total(disc)[1] / 1000)
                row["discovery_calls"].append({k: c for k, (c, _) in disc.items()})
                row["first_poll_ms"].append(total(rest)[1] / 1000)
                outputs[i] = sorted(l for l in out.stdout.decode().splitlines()
                                    if l.startswith(("queue_depth{", "queue_paused{")))
        # Steady polls: one window per config in turn, `runs` times, so the
        # configs share the machine's load (2 shared cores) alike.
        for run in range(p["runs"]):
            for i, (label, body) in enumerate(configs):
                if i in rounds_only:
                    continue
                row = rows[i]
                exp = self.start_exporter(f"zero{i}-{run}", body, grpc=False)
                w = watch_polls(exp, "main", p["zero_polls"], redis=a)
                calls, usec = total(w["commands"])
                row["poll_redis_ms"].append(usec / w["polls"] / 1000)
                row["poll_cpu_ms"].append(w["cpu_s"] / w["polls"] * 1000)
                row["poll_calls"].append(calls / w["polls"])
                row["poll_ms"] += w["samples_ms"]
                row["tracked"] = metric(self_metrics(w["text"]), "queue_exporter_tracked_keys",
                                        {"source": "main"})
                exp.stop()
        # Later discovery rounds, as `serve` runs them every
        # `discovery_interval` (here 3 s): between keyspace scans, zero
        # config reads the libraries the last scan found by name (library
        # rounds); a later scan remembers the names of no queue type and
        # makes one pass (docs/presets.md, "What zero config costs"). Read right after the
        # exporter counts a round (`queue_exporter_discovery_rounds_total`),
        # so a window holds whole rounds. Polls send a few of them too
        # (Sidekiq's `SRANDMEMBER processes`), alike in every config.
        for run in range(p["runs"]):
            for i, (label, body) in enumerate(configs):
                row = rows[i]
                row.setdefault("round_ms", [])
                row.setdefault("round_calls", [])
                row.setdefault("round_kinds", {})
                exp = self.start_exporter(f"zero-rounds{i}-{run}",
                                          body.replace("discovery_interval: 1h",
                                                       "discovery_interval: 3s"), grpc=False)
                r0, cs0 = wait_rounds(exp, "main", 2, a)
                r1, cs1 = wait_rounds(exp, "main", sum(r0.values()) + p["zero_rounds"], a)
                disc = {k: v for k, v in stats_delta(cs0, cs1).items()
                        if k.split("|")[0] in discovery_cmds}
                done = sum(r1.values()) - sum(r0.values())
                row["round_ms"].append(total(disc)[1] / 1000 / done)
                row["round_calls"].append({k: c / done for k, (c, _) in disc.items()})
                for kind in r1:
                    row["round_kinds"][kind] = row["round_kinds"].get(kind, 0) + r1[kind] - r0[kind]
                exp.stop()
        # The lower bound: one full SCAN pass by itself, by filter (Redis
        # visits every key whatever the filter; it only drops names from
        # the reply), through the harness's own client, interleaved.
        # The presets' own pass (`preset: bullmq` at prefix `bull`) too: a
        # pattern whose first bytes rule out most names costs less per name
        # than `*:meta`, which must try every position of every name.
        passes = {"untyped": (), "MATCH *:meta": ("MATCH", "*:meta"),
                  "MATCH bull:*:meta TYPE hash (the presets' pass)":
                      ("MATCH", "bull:*:meta", "TYPE", "hash"),
                  "TYPE list": ("TYPE", "list"), "TYPE zset": ("TYPE", "zset")}
        pass_ms = {k: [] for k in passes}
        # What zero config's full round adds to its untyped pass: `TYPE` of
        # every name, pipelined a page at a time.
        every_type = "`TYPE` of every name (pipelined, beside an untyped pass)"
        pass_ms[every_type] = []
        a.cmd("SELECT", db)
        for _ in range(p["runs"]):
            for label, extra in passes.items():
                cs0 = a.commandstats()
                cursor = b"0"
                while True:
                    cursor, _names = a.cmd("SCAN", cursor, "COUNT", 1000, *extra)
                    if cursor in (b"0", "0", 0):
                        break
                pass_ms[label].append(total(stats_delta(cs0, a.commandstats()))[1] / 1000)
            type_usec, cursor = 0, b"0"
            while True:
                cursor, names = a.cmd("SCAN", cursor, "COUNT", 1000)
                cs0 = a.commandstats()
                a.sock.sendall(b"".join(resp("TYPE", n.encode(errors="surrogateescape"))
                                        for n in names))
                for _ in names:
                    a._reply()
                type_usec += stats_delta(cs0, a.commandstats()).get("type", (0, 0))[1]
                if cursor in (b"0", "0", 0):
                    break
            pass_ms[every_type].append(type_usec / 1000)
        a.cmd("SELECT", 0)
        for label, ms in pass_ms.items():
            log(f"  one SCAN pass, {label}: {statistics.median(ms):.0f} ms of Redis CPU")
        for row in rows:
            if not row["discovery_ms"]:
                log(f"  {row['config']}: a later round {statistics.median(row['round_ms']):.0f} ms")
                continue
            log(f"  {row['config']}: discovery Redis {statistics.median(row['discovery_ms']):.0f} ms, "
                f"steady poll Redis {statistics.median(row['poll_redis_ms']):.2f} ms "
                f"({statistics.median(row['poll_calls']):.0f} commands)")
        for i in rounds_only:
            rows[i]["rounds_only"] = True
        self.results["zero"] = dict(keys=keys, queues=n * 5, rows=rows,
                                    same_series=outputs[0] == outputs[1],
                                    same_series_libraries=outputs[3] == outputs[1],
                                    pass_ms=pass_ms,
                                    series=len(outputs[0]))
        a.cmd("SELECT", db)
        a.cmd("FLUSHDB")
        a.cmd("SELECT", 0)

    # ---- 9: RabbitMQ methods

    def run_rabbit(self):
        p = self.p
        n = p["rabbit_queues"]
        vh = Vhost("methods")
        seed = loadgen(self.args, "rabbit-seed", "--amqp", vh.amqp(), "--prefix", "job.",
                       "--count", n, "--messages", 1)
        log(f"seeded vhost {vh.name}: {n} queues in {seed['seconds']:.1f} s")
        if not self.args.smoke:
            vh.wait_stats(n)
        names = ", ".join(f"job.{i}" for i in range(n))
        methods = [
            ("management", "stats: full", RABBIT_API, "method: management\n"),
            ("management", "stats: totals", RABBIT_API, "method: management\n    stats: totals\n"),
            ("prometheus", "stats: full", RABBIT_PROM, "method: prometheus\n"),
            ("prometheus", "stats: totals", RABBIT_PROM, "method: prometheus\n    stats: totals\n"),
            ("amqp", "", None, "method: amqp\n"),
        ]
        rows = []
        for method, variant, upstream, yaml in methods:
            def body(url):
                b = ("sources:\n  - name: rabbit\n    type: rabbitmq\n"
                     f"    {yaml}    url: {url}\n    poll_interval: 1s\n    timeout: 30s\n")
                if method == "amqp":
                    return b + f"    queues: [{names}]\n"
                return b + (f"    username: guest\n    password: guest\n"
                            f"    vhosts: [\"{vh.name}\"]\n")
            row = dict(method=method, variant=variant)
            if upstream:
                # Learn the exact requests from a `once` through a recording proxy.
                proxy = LoggingProxy(upstream)
                cfg = os.path.join(self.work, f"rabbit-{method}.yaml")
                with open(cfg, "w") as f:
                    f.write("listen: { grpc: null }\n" + body(proxy.url))
                out = subprocess.run([self.args.bin, "once", "--config", cfg], timeout=ONCE_TIMEOUT_S,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                proxy.close()
                if out.returncode != 0:
                    raise RuntimeError(f"once ({method}) failed: {out.stderr.decode()[-2000:]}")
                urls = [upstream + path for path in proxy.paths]
                row["requests"] = proxy.paths
                curl_times(urls)  # warm-up
                row["raw_b2b_ms"] = [curl_times(urls)[0] for _ in range(p["curl_runs"])]
                url = upstream
            else:
                url = vh.amqp()
                raw = loadgen(self.args, "amqp-declare", "--amqp", vh.amqp(), "--prefix", "job.",
                              "--count", n, "--runs", p["curl_runs"] + 1,
                              "--gap-ms", int(POLL_GAP_S * 1000))
                row["raw_ms"] = raw["runs_ms"][1:]
                b2b = loadgen(self.args, "amqp-declare", "--amqp", vh.amqp(), "--prefix", "job.",
                              "--count", n, "--runs", p["curl_runs"] + 1)
                row["raw_b2b_ms"] = b2b["runs_ms"][1:]
                row["requests"] = [f"{n} passive queue.declare on 8 channels (bare lapin client)"]
            exp = self.start_exporter(f"rabbit-{method}", body(url), grpc=False)
            between = None
            if upstream:
                # The raw rounds run while the exporter polls, one per poll
                # interval in the idle time between two polls, so RabbitMQ is
                # in the same state (and as warm) for both; measured before
                # or after the exporter instead, RabbitMQ's own drift moved
                # the ratio by up to 40 %.
                est = statistics.median(row["raw_b2b_ms"])
                between = Background(lambda: raw_between_polls(
                    exp, "rabbit", urls, p["rabbit_polls"], est))
            w = watch_polls(exp, "rabbit", p["rabbit_polls"], every=0.1)
            if between:
                raw = between.result()
                row["raw_ms"] = [r[0] for r in raw]
                row["raw_bytes"] = raw[-1][1]
            row["poll_ms"] = w["samples_ms"]
            row["seen"] = metric(w["text"], "queue_exporter_rabbitmq_queues", {"source": "rabbit"})
            exp.stop()
            rows.append(row)
            log(f"  {method} {variant}: poll {statistics.median(row['poll_ms']):.0f} ms, "
                f"raw {statistics.median(row['raw_ms']):.0f} ms")
        # The peer row: the full unpaged listing.
        full_url = f"{RABBIT_API}/api/queues/{vh.enc}"
        curl_times([full_url])
        full = [curl_times([full_url]) for _ in range(p["curl_runs"])]
        self.results["rabbit"] = dict(queues=n, rows=rows, unpaged_ms=[f[0] for f in full],
                                      unpaged_bytes=full[-1][1], vhost=vh.name)
        vh.delete()

    # ---- all

    def run(self):
        a = self.args
        only = set(int(x) for x in a.only.split(",")) if a.only else set(range(1, 12))
        self.redis = RedisServer(self.work)
        self.redis_version = subprocess.run(["redis-server", "--version"], capture_output=True,
                                            text=True).stdout.strip()
        self.peer_version = None
        self.rabbit_version = rabbit_available()
        log(f"private redis-server on port {self.redis.port}; work dir {self.work}")
        self.seed_main()
        rabbit = bool(self.rabbit_version)
        for wanted, step, name in (
            (only & {1, 2, 4, 5}, self.run_main, "1, 2, 4, 5"),
            (3 in only, self.run_once, "3"),
            (6 in only, self.run_push, "6"),
            (10 in only, self.run_churn, "10"),
            (7 in only, self.run_memory_redis, "7 (Redis)"),
            (7 in only and rabbit, self.run_memory_rabbit, "7 (RabbitMQ)"),
            (8 in only, self.run_growth, "8"),
            (9 in only and rabbit, self.run_rabbit, "9"),
            (11 in only, self.run_zero, "11"),
        ):
            if not wanted:
                continue
            try:
                step()
            except Exception as e:  # noqa: BLE001 - report it and go on
                import traceback
                traceback.print_exc()
                self.failed.append(name)
                self.notes.append(f"Scenario {name} failed: {str(e)[:500]}")
                log(f"scenario {name} FAILED: {e}")
        if not self.rabbit_version and only & {7, 9}:
            self.notes.append("RabbitMQ's management API did not answer on 127.0.0.1:15672: "
                              "the RabbitMQ rows are empty.")


# ---------------------------------------------------------------- report


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    distro = ""
    try:
        with open("/etc/os-release") as f:
            distro = dict(l.strip().split("=", 1) for l in f if "=" in l).get("PRETTY_NAME", "").strip('"')
    except OSError:
        pass
    return dict(nproc=os.cpu_count(), cpu=cpu, kernel=platform.release(), memory=mem,
                distro=distro, load=os.getloadavg())


def git_rev(root):
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "src", "Cargo.toml"],
                               capture_output=True, text=True).stdout.strip()
        return rev + (" (with uncommitted changes under src/)" if dirty else "")
    except OSError:
        return "unknown"


def met(ok):
    if ok is None:
        return "—"
    return "**yes**" if ok else "**no**"


def linear_check(points, key):
    """Marginal cost per key over the last step (e.g. 50k → 200k) vs over the
    first (1k → 10k): linear when it is at most 1.5×, so fixed costs (a
    process's base RSS) do not count. Returns (ratio, ok) or (None, None)."""
    if len(points) < 3:
        return None, None
    a, b = points[0], points[1]
    c, d = points[-2], points[-1]
    first = (b[key] - a[key]) / (b["keys"] - a["keys"])
    last = (d[key] - c[key]) / (d["keys"] - c["keys"])
    if first <= 0:
        return None, None
    r = last / first
    return r, r <= 1.5


def flatness(samples):
    """RSS growth over the second half of the run, as MB per minute (least
    squares) and as the change from the second quarter's mean to the last
    quarter's; flat when that change is under 5 % (and 1 MB)."""
    pts = [(t, r) for t, r in samples if r is not None]
    if len(pts) < 4:
        return None, None, None
    half = pts[len(pts) // 2:]
    n = len(half)
    mt = sum(t for t, _ in half) / n
    mr = sum(r for _, r in half) / n
    den = sum((t - mt) ** 2 for t, _ in half) or 1
    slope = sum((t - mt) * (r - mr) for t, r in half) / den * 60
    q = len(pts) // 4 or 1
    q2 = statistics.mean(r for _, r in pts[q:2 * q])
    q4 = statistics.mean(r for _, r in pts[-q:])
    change = q4 - q2
    flat = change <= max(1.0, 0.05 * q2)
    return slope, change, flat


def plots(res, outdir, stem):
    """growth and memory PNGs; returns their paths (or [] without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        return []
    paths = []
    g = res.get("growth")
    if g:
        keys = [p["keys"] for p in g]
        fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
        series = [
            ("poll_ms", "steady poll (ms)"),
            ("redis_ms", "Redis CPU per poll (ms, commandstats)"),
            ("rss_mb", "exporter RSS peak (MB)"),
        ]
        for ax, (k, title) in zip(axes, series):
            ys = [p[k] for p in g]
            ax.plot(keys, ys, "o-", label="queue-exporter")
            if k == "redis_ms":
                ax.plot(keys, [p["redis_cpu_ms"] for p in g], "s--", alpha=0.7,
                        label="Redis CPU per poll (ms, INFO cpu)")
            # Linear growth: the first step extended.
            if len(g) >= 2:
                a, b = g[0], g[1]
                slope = (b[k] - a[k]) / (b["keys"] - a["keys"])
                ax.plot(keys, [a[k] + slope * (x - a["keys"]) for x in keys], ":", color="grey",
                        label=f"linear: the {a['keys']:,} → {b['keys']:,} step extended")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
            ax.set_xlabel("queue keys (half lists, half zsets)")
            ax.set_title(title)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle("queue-exporter growth (log-log axes)")
        fig.tight_layout()
        path = os.path.join(outdir, f"{stem}-growth.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    mem = [(k, res[k]) for k in ("mem_redis", "mem_rabbit") if k in res]
    if mem:
        fig, ax = plt.subplots(figsize=(8, 4))
        for k, m in mem:
            label = (f"Redis, {m['queues']:,} queues" if k == "mem_redis"
                     else f"RabbitMQ, {m['queues']:,} queues (management)")
            ax.plot([t / 60 for t, _ in m["samples"]], [r for _, r in m["samples"]], label=label)
        ax.axhline(30, color="red", linestyle=":", label="target 30 MB")
        ax.set_xlabel("minutes since start")
        ax.set_ylabel("RSS (MB)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
        ax.set_title("queue-exporter RSS over time, poll_interval 1s")
        fig.tight_layout()
        path = os.path.join(outdir, f"{stem}-memory.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def command_table(delta, per, label):
    """Markdown rows of a commandstats delta divided by `per` (polls or scrapes)."""
    rows = sorted(delta.items(), key=lambda kv: -kv[1][1])
    out = [f"| command | calls per {label} | Redis CPU per {label} | µs per call |", "|---|---|---|---|"]
    for name, (calls, usec) in rows:
        out.append(f"| `{name.upper()}` | {calls / per:,.0f} | {usec / per / 1000:.2f} ms | "
                   f"{usec / calls:.2f} |")
    c, u = total(delta)
    out.append(f"| total | {c / per:,.0f} | {u / per / 1000:.2f} ms | |")
    return out


def merge(deltas):
    out = {}
    for d in deltas:
        for k, (c, u) in d.items():
            c0, u0 = out.get(k, (0, 0))
            out[k] = (c0 + c, u0 + u)
    return out


def report(res, meta):
    p = meta["p"]
    m = meta["machine"]
    L = []
    L.append("# Benchmarks")
    L.append("")
    if meta["smoke"]:
        L.append("**Smoke run** (tiny data, one run each): proves the harness works; "
                 "the numbers mean nothing.")
        L.append("")
    L.append(f"Written by `scripts/bench` (issue 11's harness) on {meta['started']} UTC, "
             f"in {meta['minutes']:.1f} minutes.")
    L.append("")
    L.append(f"- command: `{meta['command']}`")
    L.append(f"- machine: {m['nproc']} CPUs (`nproc`), {m['cpu']}, kernel {m['kernel']}, "
             f"{m['memory']} RAM, {m['distro']}; load average at the end "
             f"{m['load'][0]:.2f} / {m['load'][1]:.2f} / {m['load'][2]:.2f} (1 / 5 / 15 min)")
    L.append(f"- queue-exporter: `{meta['binary']}` ({meta['version']}), commit {meta['rev']}")
    L.append(f"- peers: {meta['redis_version'].split(' sha=')[0]}; "
             f"{meta['peer_version'] or 'redis_exporter not installed'}; "
             f"RabbitMQ {meta['rabbit_version'] or 'not available'}")
    L.append(f"- data: {p['lists']:,} lists and {p['zsets']:,} zsets of {p['items']} items among "
             f"{p['other']:,} other keys (strings), in a private `redis-server --save \"\" "
             f"--appendonly no` on a free port. Zset scores are enqueue times "
             f"`now − random×3600` with 3 decimals (all due); members are short, so the zsets are "
             f"`{meta.get('zset_encoding', '?')}`s. Exporter config: the defaults, "
             "`poll_interval: 1s`, patterns `queue:list:*` and `queue:zset:*` (`score: timestamp`).")
    L.append("")
    L.append("The machine is shared and has 2 cores, so absolute numbers move between runs; "
             "each peer is measured in the same run, and the ratios are what the targets are "
             "about. Cells read min / **median** / max.")
    for n in meta["notes"]:
        L.append("")
        L.append(f"> {n}")
    L.append("")
    L.append("## Results")
    L.append("")
    L.append("| # | scenario | queue-exporter | peer (same run) | ratio (medians) | target | met |")
    L.append("|---|---|---|---|---|---|---|")
    details = []

    main = res.get("main")
    peer_ms = peer_usec = None
    if main:
        polls = [x for r in main["runs"] for x in r["polls"]]
        peer = main["peer"]
        ours = spread(polls)
        peer_s = spread([s["ms"] for s in peer]) if peer else None
        ratio = peer_s[1] / ours[1] if peer_s and ours else None
        peer_ms = peer_s[1] if peer_s else None
        L.append(f"| 1 | steady poll vs one redis_exporter `-check-keys` scrape ({len(polls)} polls, "
                 f"{len(peer)} scrapes) | {fmt3(ours)} | {fmt3(peer_s)} | "
                 f"{ratio:.1f}× faster | {TARGETS[1]} | {met(ratio >= 50 if ratio else None)} |"
                 if ratio else
                 f"| 1 | steady poll ({len(polls)} polls) | {fmt3(ours)} | — | — | {TARGETS[1]} | — |")
        per_poll = [total(r["commands"])[1] / r["window_polls"] / 1000 for r in main["runs"]]
        per_scrape = [s["usec"] / 1000 for s in peer]
        ours2 = spread(per_poll)
        peer2 = spread(per_scrape)
        peer_usec = peer2[1] if peer2 else None
        r2 = ours2[1] / peer2[1] if peer2 and peer2[1] else None
        L.append(f"| 2 | Redis CPU per poll vs per scrape (`INFO commandstats` usec) | {fmt3(ours2)} | "
                 f"{fmt3(peer2)} | " + (f"1/{1 / r2:.1f}" if r2 else "—") +
                 f" | {TARGETS[2]} | {met(r2 <= 1 / 15 if r2 else None)} |")
        # Steady-state CPU %.
        idle = main["idle_cpu"]
        pcts = [r["cpu_s"] / r["window_s"] * 100 for r in main["runs"]]
        net = [x - idle * 100 for x in pcts]
        peer_pct = None
        if peer:
            peer_cpu = statistics.median(s["cpu_ms"] - idle * s["ms"] for s in peer)
            peer_pct = peer_cpu / 1000 / 15 * 100
        L.append(f"| 2 | steady Redis CPU at 1 s polls (`INFO cpu`, net of idle "
                 f"{idle * 100:.2f} %) vs redis_exporter scraped every 15 s | "
                 f"{fmt3(spread(net), '%')} | " + (f"{fmt(peer_pct, '%')}" if peer_pct is not None else "—") +
                 f" | " + (f"{statistics.median(net) / peer_pct:.1f}× the peer's load"
                           if peer_pct and peer_pct > 0 and statistics.median(net) > 0 else "—") +
                 " | (reported) | — |")
        details += report_main(main, p, res)
    churn = res.get("churn")
    if peer_ms is None and churn:
        # `once` alone with scenario 10: its static row's scrapes.
        peer_ms = (spread([s["ms"] for r in churn[:1] for s in r.get("peer") or []]) or [None] * 3)[1]
    once = res.get("once")
    if once:
        o = spread([r["ms"] for r in once])
        r3 = peer_ms / o[1] if peer_ms else None
        L.append(f"| 3 | `once` (process: discovery + poll + print; age histograms only with "
                 f"`--histograms`) vs one scrape | {fmt3(o)} | "
                 + (f"{fmt(peer_ms)} (median scrape) | {r3:.1f}× faster" if r3 else "— | —")
                 + f" | {TARGETS[3]} | {met(r3 >= 5 if r3 else None)} |")
        firsts = [r["first_poll_ms"] for r in main["runs"]] if main else []
        fp = spread([x for x in firsts if x])
        details += [
            "", "### 3. `once` and the first poll", "",
            *([f"First poll of `serve` (discovery included), from its histogram: {fmt3(fp)}.", ""]
              if fp else []),
            f"{len(once)} runs of `queue-exporter once --config …` (stdout to a pipe): "
            f"{fmt3(spread([r['ms'] for r in once]))}; output {once[-1]['bytes']:,} bytes; "
            f"Redis CPU per run (commandstats) "
            f"{fmt3(spread([r['usec'] / 1000 for r in once]))}, "
            f"{statistics.median(r['calls'] for r in once):,.0f} commands.",
        ]
        oh = res.get("once_histograms")
        if oh:
            details += ["", f"With `--histograms` (every age histogram measured too), {len(oh)} runs: "
                        f"{fmt3(spread([r['ms'] for r in oh]))}; output {oh[-1]['bytes']:,} bytes; "
                        f"Redis CPU per run {fmt3(spread([r['usec'] / 1000 for r in oh]))}, "
                        f"{statistics.median(r['calls'] for r in oh):,.0f} commands."]
    if main:
        for kind in ("plain", "gzip"):
            runs = [r["http"][kind] for r in main["runs"]]
            p50 = spread([x["latency"]["p50_ms"] for x in runs])
            p99 = spread([x["latency"]["p99_ms"] for x in runs])
            ok = p50[1] <= 5 and p99[1] <= 20
            L.append(f"| 4 | `/metrics`, 10 concurrent scrapers, {kind} "
                     f"({runs[0]['body_bytes']:,} bytes) | p50 {fmt3(p50)}; p99 {fmt3(p99)} | — | — | "
                     f"{TARGETS[4]} | {met(ok)} |")
        for kind in ("plain", "gzip"):
            sc = [r["scrape"][kind] for r in main["runs"]]
            first = spread([x for s in sc for x in s["first_ms"]])
            again = spread([x for s in sc for x in s["again_ms"]])
            size = next((s["bytes"] for s in sc if s["bytes"]), 0)
            L.append(f"| 4 | one {kind} scrape alone ({size:,} bytes) | first of a new snapshot "
                     f"(encode{' + deflate' if kind == 'gzip' else ''}): {fmt3(first)}; "
                     f"repeated (cached): {fmt3(again)} | — | — | (reported) | — |")
        g = [r["grpc"] for r in main["runs"]]
        rps = spread([x["rps"] for x in g])
        p99 = spread([x["latency"]["p99_ms"] for x in g])
        proof = res.get("grpc_proof")
        zero = total(proof["commands"])[0] if proof else None
        errs = sum(sum(x["errors"].values()) for x in g)
        ok = rps[1] >= 20000 and p99[1] <= 2 and zero == 0 and errs == 0
        L.append(f"| 5 | gRPC `GetMetrics`, {g[0]['maps']:,} trigger maps, {g[0]['connections']} "
                 f"clients | {fmt3(rps, 'rps')}; p99 {fmt3(p99)}; "
                 f"Redis commands caused: {zero} (errors {errs}) | — | — | {TARGETS[5]} | {met(ok)} |")
        details += report_http(main)
        details += report_grpc(main, proof)
    push = res.get("push")
    if push:
        lat = push["latency"]
        ok = lat["p99_ms"] <= 350 and push["missed"] == 0
        L.append(f"| 6 | push: RPUSH into an empty list → `StreamIsActive` true, poll_interval 250ms "
                 f"({push['trials']} trials) | p50 {fmt(lat['p50_ms'])}, **p99 {fmt(lat['p99_ms'])}**, "
                 f"max {fmt(lat['max_ms'])}; missed {push['missed']} | — | — | {TARGETS[6]} | {met(ok)} |")
        details += ["", "### 6. Push latency", "",
                    f"{push['trials']} trials; each pushes at a random phase of the 250 ms poll "
                    "after the stream has seen the list empty. Sorted latencies (ms): "
                    + ", ".join(f"{x:.0f}" for x in sorted(push["samples_ms"])) + "."]
    for key, what in (("mem_redis", "Redis"), ("mem_rabbit", "RabbitMQ")):
        mm = res.get(key)
        if not mm:
            continue
        rss = [r for _, r in mm["samples"] if r is not None]
        slope, change, flat = flatness(mm["samples"])
        ok = (max(rss) <= 30 and bool(flat)) if flat is not None else None
        mins = mm["samples"][-1][0] / 60
        extra = (f"{mm['tracked']:.0f} keys tracked" if key == "mem_redis"
                 else f"{(mm['seen'] or 0):.0f} queues seen")
        L.append(f"| 7 | memory: {what}, {mm['queues']:,} queues, poll 1 s, {mins:.1f} min "
                 f"({extra}, {mm['polls'] or 0:.0f} polls) | RSS {fmt3(spread(rss), 'MB')}; "
                 + (f"second half {slope:+.2f} MB/min, last vs 2nd quarter {change:+.1f} MB"
                    if slope is not None else "too few samples")
                 + f" | — | — | {TARGETS[7]} | {met(ok)} |")
    if "mem_redis" in res or "mem_rabbit" in res:
        details += report_memory(res)
    growth = res.get("growth")
    if growth:
        checks = {k: linear_check(growth, k) for k in ("poll_ms", "redis_ms", "rss_mb")}
        oks = [v[1] for v in checks.values() if v[1] is not None]
        desc = "; ".join(f"{name} {v[0]:.2f}×" for name, v in
                         zip(("poll", "Redis CPU", "RSS"), checks.values()) if v[0] is not None)
        sizes = ", ".join(f"{g['keys']:,}" for g in growth)
        if len(growth) >= 3:
            step = (f"cost per added key, {growth[-2]['keys']:,} → {growth[-1]['keys']:,} vs "
                    f"{growth[0]['keys']:,} → {growth[1]['keys']:,}: {desc}")
        else:
            step = "too few points to judge"
        last = growth[-1]
        L.append(f"| 8 | growth {sizes} queue keys | at {last['keys']:,}: poll {fmt(last['poll_ms'])}, "
                 f"Redis {fmt(last['redis_ms'])}/poll, RSS {fmt(last['rss_mb'], 'MB')}; {step} "
                 f"| — | — | {TARGETS[8]} (≤ 1.5×) | {met(all(oks) if oks else None)} |")
        details += report_growth(growth)
    rab = res.get("rabbit")
    if rab:
        for row in rab["rows"]:
            ours = spread(row["poll_ms"])
            raw = spread(row["raw_ms"])
            r = ours[1] / raw[1] if raw and raw[1] else None
            what = f"{row['method']}" + (f", `{row['variant']}`" if row["variant"] else "")
            rawwhat = ("bare AMQP client, same declares" if row["method"] == "amqp"
                       else f"curl, same {len(row['requests'])} request(s), {row['raw_bytes'] / 1e3:,.0f} KB")
            L.append(f"| 9 | RabbitMQ {rab['queues']:,} queues: {what} | poll {fmt3(ours)} | "
                     f"{rawwhat}: {fmt3(raw)} | {r:.2f}× | {TARGETS[9]} | {met(r <= 1.2 if r else None)} |")
        un = spread(rab["unpaged_ms"])
        L.append(f"| 9 | peer: full unpaged `/api/queues/{{vhost}}` by curl "
                 f"({rab['unpaged_bytes'] / 1e6:.2f} MB) | — | {fmt3(un)} | — | (reference) | — |")
        details += report_rabbit(rab)
    if churn:
        L += churn_rows(churn, res.get("churn_floor"))
        details += report_churn(churn, res.get("churn_floor"))
    zero = res.get("zero")
    if zero:
        z, pr = zero["rows"][0], zero["rows"][1]
        d = statistics.median(z["discovery_ms"]) / statistics.median(pr["discovery_ms"])
        zq, pq = statistics.median(z["poll_redis_ms"]), statistics.median(pr["poll_redis_ms"])
        q = zq / pq if pq else None
        L.append(f"| 11 | zero config vs the same {zero['queues']:,} queues as presets, "
                 f"{zero['keys']:,} keys: discovery round | {fmt3(spread(z['discovery_ms']))} | "
                 f"{fmt3(spread(pr['discovery_ms']))} | {d:.2f}× | {TARGETS[11]} | {met(d <= 1.1)} |")
        L.append(f"| 11 | … steady poll (Redis CPU per poll, commandstats) | "
                 f"{fmt3(spread(z['poll_redis_ms']))} | {fmt3(spread(pr['poll_redis_ms']))} | "
                 f"{q:.2f}× | {TARGETS[11]} | "
                 f"{met(q <= 1.1 if q else None)} |")
        if z.get("round_ms"):
            d = statistics.median(z["round_ms"]) / statistics.median(pr["round_ms"])
            L.append(f"| 11 | … a later discovery round (`serve`, every 3 s: a library round "
                     f"between scans) | "
                     f"{fmt3(spread(z['round_ms']))} | {fmt3(spread(pr['round_ms']))} | "
                     f"{d:.2f}× | {TARGETS[11]} | {met(d <= 1.1)} |")
            sc = zero["rows"][4] if len(zero["rows"]) > 4 else None
            if sc and sc.get("round_ms"):
                ds = statistics.median(sc["round_ms"]) / statistics.median(pr["round_ms"])
                L.append(f"| 11 | … a later scan (2–4 minutes apart at this size; here "
                         f"`keyspace_scan_interval: 0s`: one remembered pass) | "
                         f"{fmt3(spread(sc['round_ms']))} | {fmt3(spread(pr['round_ms']))} | "
                         f"{ds:.2f}× | {TARGETS[11]} | {met(ds <= 1.1)} |")
                # Ten minutes at `discovery_interval: 30s`: 20 rounds. The
                # default scans 100x the last scan's wall time apart, at most
                # 5 minutes: at this size a full scan took 2.4 s and a later
                # one 1.2 s (the exporter's debug line "keyspace scanned",
                # 2026-11-27 03:42 UTC), so scans run 2-4 minutes apart: per
                # ten minutes one full scan (`TYPE` of every name, every 10
                # minutes), three later scans and 16 library rounds. The
                # presets make 20 rounds of theirs.
                full, later, lib = (statistics.median(z["discovery_ms"]),
                                    statistics.median(sc["round_ms"]),
                                    statistics.median(z["round_ms"]))
                zt = full + 3 * later + 16 * lib
                pt = statistics.median(pr["discovery_ms"]) + 19 * statistics.median(pr["round_ms"])
                L.append(f"| 11 | … discovery over ten minutes at `discovery_interval: 30s` "
                         f"(1 full scan, 3 later scans, 16 library rounds; presets: 20 rounds) | "
                         f"{fmt(zt)} | {fmt(pt)} | {zt / pt:.2f}× | {TARGETS[11]} | "
                         f"{met(zt / pt <= 1.1)} |")
        if len(zero["rows"]) > 3:
            lo = zero["rows"][3]
            d = statistics.median(lo["discovery_ms"]) / statistics.median(pr["discovery_ms"])
            lq = statistics.median(lo["poll_redis_ms"])
            q = lq / pq if pq else None
            L.append(f"| 11 | zero config, libraries only (`plain_keys: false`) vs the same "
                     f"presets: discovery round | {fmt3(spread(lo['discovery_ms']))} | "
                     f"{fmt3(spread(pr['discovery_ms']))} | {d:.2f}× | {TARGETS[11]} | "
                     f"{met(d <= 1.1)} |")
            if lo.get("round_ms"):
                d = statistics.median(lo["round_ms"]) / statistics.median(pr["round_ms"])
                L.append(f"| 11 | … a later discovery round (`serve`, every 3 s) | "
                         f"{fmt3(spread(lo['round_ms']))} | {fmt3(spread(pr['round_ms']))} | "
                         f"{d:.2f}× | {TARGETS[11]} | {met(d <= 1.1)} |")
            L.append(f"| 11 | … steady poll (Redis CPU per poll, commandstats) | "
                     f"{fmt3(spread(lo['poll_redis_ms']))} | {fmt3(spread(pr['poll_redis_ms']))} | "
                     f"{q:.2f}× | {TARGETS[11]} | {met(q <= 1.1 if q else None)} |")
        details += report_zero(zero)
    L += details
    L += ["", "## How each number is measured", ""] + METHOD_NOTES
    return "\n".join(L) + "\n"


def report_main(main, p, bench_results):
    out = ["", "### 1–2. Steady polls and Redis CPU", ""]
    out.append("The issue's data, with the default config. Nothing writes to it during the runs, "
               "so with `client_tracking` (the default) Redis reports every queue unchanged after "
               "the first poll, and a steady poll sends one `PING` plus the age histograms that "
               "fall due; discovery's `SCAN` runs every 30 s. What queues under real work cost, up "
               "to every queue fed and consumed every second, is scenario 10.")
    out.append("")
    runs = main["runs"]
    out.append("| run | polls timed | poll median | poll max | Redis CPU/poll (commandstats) | "
               "Redis CPU/poll (`INFO cpu`) | commands/poll | tracked keys | exporter RSS |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(runs, 1):
        calls, usec = total(r["commands"])
        n = r["window_polls"]
        out.append(f"| {i} | {len(r['polls'])} | {fmt(statistics.median(r['polls']))} | "
                   f"{fmt(max(r['polls']))} | {fmt(usec / n / 1000)} | {fmt(r['cpu_s'] / n * 1000)} | "
                   f"{calls / n:,.0f} | {r['tracked']:.0f} | {fmt(r['rss_mb'], 'MB')} |")
    all_cmds = merge(r["commands"] for r in runs)
    polls = sum(r["window_polls"] for r in runs)
    out += ["", f"Redis commands per poll, all runs ({polls} polls; discovery every 30 s is "
            "included, as in steady state):", ""]
    out += command_table(all_cmds, polls, "poll")
    fl = bench_results.get("floor")
    if fl:
        out += ["", f"Floor: one `LLEN` per list and one `ZCARD` per zset ({fl['keys']:,} commands) "
                f"pipelined in chunks of 1,000 by a bare client (`benches/loadgen.rs floor`, "
                f"{len(fl['runs_ms'])} rounds back to back): {fmt3(spread(fl['runs_ms']))}; Redis CPU "
                f"{fmt(fl['redis_ms'])} per round (commandstats)."]
    fc, fn = bench_results.get("floor_cadence"), bench_results.get("floor_needed")
    if fc and fn:
        rounds = len(fn["runs_ms"])
        out += ["", f"The floor at the poll cadence (one round a second, as polls come, so Redis's "
                f"caches are as cold for each round as for each poll; {rounds} rounds): the same "
                f"{fc['keys']:,} commands cost Redis {fmt(fc['redis_ms'])} per round. The reads the "
                f"default values need ({fn['commands']:,} commands: `LLEN` per list; `ZCARD`, the "
                f"oldest item by `ZRANGE 0 0 WITHSCORES` and the scheduled count by `ZCOUNT` per "
                f"timestamp zset) cost {fmt(fn['redis_ms'])} per round:", ""]
        out += command_table(fn["commands_delta"], rounds, "round")
        main = bench_results.get("main") or {}
        peer = [r["usec"] / 1000 for r in main.get("peer") or [] if r.get("usec")]
        if peer:
            budget = statistics.median(peer) / 15
            out += ["", f"1/15 of the peer's median scrape is {fmt(budget)}. The floor of the "
                    f"needed reads alone is {fmt(fn['redis_ms'])}, {fn['redis_ms'] / budget:.0%} of "
                    f"it, before discovery's `SCAN` (a pass over every key in the database each "
                    f"`discovery_interval`) and the age histogram."]
    variants = bench_results.get("variants") or []
    if variants:
        peer_ms = [r["usec"] / 1000 for r in main.get("peer") or [] if r.get("usec")]
        peer_med = statistics.median(peer_ms) if peer_ms else None
        out += ["", "The same steady polls with other settings, on the same static data (queues "
                "under real work, fed and consumed, are scenario 10). \"Redis CPU/poll\" counts the "
                "exporter's commands; \"Exporter CPU/poll\" is the exporter process's user + system "
                "time over the window (it includes one "
                "`/metrics` encode per poll, for the harness's reads). One run each; not targets:", "",
                "| config | queues written | polls timed | poll median | keys served unchanged | "
                "Redis CPU/poll (commandstats) | vs peer scrape | exporter CPU/poll | "
                "top commands per poll | writer: calls/s, µs per call |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for v in variants:
            n = v["window_polls"]
            top = sorted(v["commands"].items(), key=lambda kv: -kv[1][1])[:3]
            tops = ", ".join(f"`{k.upper()}` {c / n:,.0f} calls {u / n / 1000:.2f} ms" for k, (c, u) in top)
            ms = total(v["commands"])[1] / n / 1000
            config = v.get("config") or v["name"].split(" (")[0]
            what = v.get("what") or v["name"].split(" (")[1][:-1]
            share = v.get("share") or 0
            wc, wu = total(v.get("writes") or {})
            writer = (f"{wc / v['seconds']:,.0f}/s, {wu / wc:.2f} µs" if wc else "—")
            unchanged = v.get("unchanged")
            out.append(f"| `{config}` ({what}) | {share:.0%} | {len(v['polls'])} | "
                       f"{fmt(statistics.median(v['polls']))} | "
                       + (f"{unchanged:,.0f}" if unchanged is not None else "—") + " | "
                       f"{fmt(ms)} | " + (f"1/{peer_med / ms:.1f}" if peer_med and ms else "—") +
                       " | " + (fmt(v["exporter_cpu_ms"]) if v.get("exporter_cpu_ms") is not None
                                else "—") +
                       f" | {tops} | {writer} |")
    peer = main["peer"]
    if peer:
        out += ["", f"redis_exporter, per scrape ({len(peer)} scrapes, "
                f"{peer[-1]['keys']:,} `redis_key_size` series; Redis CPU per scrape by `INFO cpu` "
                f"{fmt(statistics.median(s['cpu_ms'] for s in peer))}):", ""]
        out += command_table(merge(s["commands"] for s in peer), len(peer), "scrape")
    return out


def churn_target(row):
    """Issue 28's target for a row: 1/15 of the peer static and at 10 %,
    1/10 at 100 %."""
    return 10 if row["share"] >= 1 else 15


def scan_per_poll(row):
    """Discovery's SCAN in a row, Redis ms per poll (amortised)."""
    calls, usec = row["commands"].get("scan", (0, 0))
    return usec / row["window_polls"] / 1000


def churn_rows(churn, floor):
    """Results rows of scenario 10: the exporter's Redis CPU per poll
    against the peer's per scrape, same run, same writes; and the floor of
    a poll when every queue changes each second."""
    out = []
    for r in churn:
        n = r["window_polls"]
        ours = total(r["commands"])[1] / n / 1000
        peer = spread([s["usec"] / 1000 for s in r.get("peer") or []])
        ratio = peer[1] / ours if peer and ours else None
        goal = churn_target(r)
        stale = r.get("histogram_staleness")
        out.append(f"| 10 | Redis CPU per poll, {r['what']} (`{r['config']}`, {n} polls) vs per "
                   f"scrape under the same writes | {fmt(ours)}"
                   + (f"; histogram staleness at the end {stale:.0f} s" if stale is not None else "")
                   + f" | {fmt3(peer)} | " + (f"1/{ratio:.1f}" if ratio else "—")
                   + f" | ≤ 1/{goal} | " + (met(ratio >= goal) if ratio and r["config"] == "default"
                                            else "(reported)" if ratio else "—") + " |")
    full = [r for r in churn if r["share"] >= 1 and r["config"] == "default"]
    if floor and full:
        r = full[0]
        peer = spread([s["usec"] / 1000 for s in r.get("peer") or []])
        scan = scan_per_poll(r)
        least = floor["redis_ms"] + scan
        out.append(f"| 10 | floor at 100 %: the reads every changed key needs "
                   f"({floor['commands']:,} commands from a bare client, one round a second) "
                   f"{fmt(floor['redis_ms'])} + discovery's `SCAN` {fmt(scan)}/poll | {fmt(least)} | "
                   + (f"{fmt(peer[1])} | 1/{peer[1] / least:.1f}" if peer else "— | —")
                   + " | (the least a poll can cost) | — |")
    return out


def report_churn(churn, floor=None):
    out = ["", "### 10. Queues under real work", "",
           "The issue-11 data, default config (`poll_interval: 1s`, histogram on, "
           "`age_histogram_interval: 15s`, `discovery_interval: 30s`), while a writer on its own "
           "connection works a share of the queues once a second as producers and workers do: "
           "a list gets `RPUSH` (a new job at the tail) and `LPOP` (the oldest), a zset `ZADD` of a "
           "new member scored *now* and `ZPOPMIN` (the oldest). Each row starts a fresh exporter, "
           "lets it settle for 35 polls (past one histogram interval, and past the 30 polls after "
           "which `client_tracking` pauses itself when it spares fewer than 10 % of the keys, the "
           "steady state under heavy writes), then watches whole polls spanning a "
           "discovery interval, so discovery's `SCAN` is in the figures as in steady state. Redis "
           "CPU counts the exporter's commands only (`INFO commandstats` usec); redis_exporter "
           "`-check-keys` is scraped just before, under the same writes, its figures without the "
           "writer's commands. The rows run one after another on the same data, which the "
           "writes keep ageing (the seeded data comes back for later scenarios).", "",
           "| config | queues fed and consumed | polls | poll median | keys served unchanged | "
           "Redis CPU/poll | peer per scrape (median) | ratio | exporter CPU/poll | "
           "writer: calls/s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in churn:
        n = r["window_polls"]
        ms = total(r["commands"])[1] / n / 1000
        peer = spread([s["usec"] / 1000 for s in r.get("peer") or []])
        wc, _ = total(r.get("writes") or {})
        unchanged = r.get("unchanged")
        out.append(f"| `{r['config']}` | {r['share']:.0%} | {n} | {fmt(statistics.median(r['polls']))} | "
                   + (f"{unchanged:,.0f}" if unchanged is not None else "—") + f" | {fmt(ms)} | "
                   + (fmt(peer[1]) if peer else "—") + " | "
                   + (f"1/{peer[1] / ms:.1f}" if peer and ms else "—") + f" | "
                   f"{fmt(r['exporter_cpu_ms'])} | " + (f"{wc / r['seconds']:,.0f}/s" if wc else "—")
                   + " |")
    if floor:
        rounds = len(floor["runs_ms"])
        out += ["", f"The floor, after the rows on the same data: the reads the default values need "
                f"for every key ({floor['commands']:,} commands: `LLEN` per list; `ZCARD`, the oldest "
                f"item by `ZRANGE 0 0 WITHSCORES` and the scheduled count by `ZCOUNT` per timestamp "
                f"zset), pipelined by a bare client (`benches/loadgen.rs floor --needed`) one round a "
                f"second as polls come, while the writer works every queue as in the 100 % rows (its "
                f"own commands left out), {rounds} rounds: {fmt(floor['redis_ms'])} per round. When every "
                f"queue changes each second, every poll must read all of them; discovery's `SCAN` "
                f"(every 30 s over the whole keyspace) comes on top.", ""]
        out += command_table(floor["commands_delta"], rounds, "round")
    for r in churn:
        n = r["window_polls"]
        out += ["", f"`{r['config']}`, {r['what']}: the exporter's commands per poll ({n} polls):", ""]
        out += command_table(r["commands"], n, "poll")
        if r.get("peer"):
            out += ["", f"redis_exporter under the same writes, per scrape ({len(r['peer'])} scrapes):", ""]
            out += command_table(merge(s["commands"] for s in r["peer"]), len(r["peer"]), "scrape")
    return out


def report_grpc(main, proof):
    out = ["", "### 5. gRPC `GetMetrics`", ""]
    out.append(f"{GRPC_CLIENTS} clients, each on its own HTTP/2 connection, send `GetMetrics` back to "
               "back (one in flight each: with more in flight, requests only queue, since in flight = "
               "rate × latency). Maps: even ones name one queue exactly, odd ones a brace glob over "
               "a group of queues (`{a,b,c,d}`, operation sum/max/avg), so together they cover "
               "every queue; modes QueueLength, Ready, Scheduled, Age. Each map's `GetMetricSpec` "
               "is asked once, then `GetMetrics` with its name, round robin over the maps. Polls run "
               "as usual (1 s).")
    out.append("")
    out.append("| run | requests | req/s | p50 | p99 | max | errors | exporter CPU per request | "
               "load generator CPU | polls | commands/poll during load | commands/poll without load |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(main["runs"], 1):
        g = r["grpc"]
        lat = g["latency"]
        base = total(r["commands"])[0] / r["window_polls"]
        during = total(g["window_commands"])[0] / g["window_polls"] if g["window_polls"] else None
        out.append(f"| {i} | {g['requests']:,} | {g['rps']:,.0f} | {fmt(lat['p50_ms'])} | "
                   f"{fmt(lat['p99_ms'])} | {fmt(lat['max_ms'])} | {g['errors'] or 0} | "
                   f"{per_request_us(g)} | {cores(g)} | {g['window_polls']} | " + (f"{during:,.0f}" if during else "—") +
                   f" | {base:,.0f} |")
    if proof:
        calls = total(proof["commands"])[0]
        out += ["", f"The zero, shown directly: an exporter with `poll_interval: 1h` (one poll at "
                f"start, then none) answered {proof['requests']:,} `GetMetrics` in "
                f"{proof['seconds']:.0f} s ({proof['rps']:,.0f}/s, p99 {fmt(proof['latency']['p99_ms'])}, "
                f"exporter CPU {per_request_us(proof)} per request); Redis's `INFO commandstats` "
                f"moved by **{calls}** commands" +
                (" (" + ", ".join(f"{k} {c}" for k, (c, _) in proof["commands"].items()) + ")"
                 if calls else "") + " in that time, besides the harness's own `INFO`."]
    return out


def per_request_us(g):
    """Exporter CPU per request in µs (warm-up requests included in both)."""
    if g.get("server_cpu_s") is None:
        return "—"
    n = g["requests"] + g.get("warmup_requests", 0) + sum((g.get("errors") or {}).values() or [0])
    return f"{g['server_cpu_s'] / max(n, 1) * 1e6:,.0f} µs" if n else "—"


def cores(g):
    """The load generator's CPU as cores busy over its run."""
    secs = g["seconds"] + (1.0 if "warmup_requests" in g else 0.0)
    return f"{g['client_cpu_s'] / secs:.2f} cores" if g.get("client_cpu_s") is not None else "—"


def report_http(main):
    out = ["", "### 4. `/metrics` under 10 concurrent scrapers", "",
           "| run | format | scrapes | per second | p50 | p99 | max | exporter CPU per scrape | "
           "load generator CPU |", "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(main["runs"], 1):
        for kind in ("plain", "gzip"):
            h = r["http"][kind]
            lat = h["latency"]
            out.append(f"| {i} | {kind} | {h['requests']:,} | {h['rps']:,.0f} | {fmt(lat['p50_ms'])} | "
                       f"{fmt(lat['p99_ms'])} | {fmt(lat['max_ms'])} | {per_request_us(h)} | {cores(h)} |")
    out += ["", "The exporter polls every second meanwhile, so the first scrape after each poll "
            "encodes (and for gzip compresses) the new snapshot; the others are served from the cache. "
            "Both processes share the machine's 2 cores."]
    return out


def report_memory(res):
    out = ["", "### 7. Memory over time", ""]
    for key, what in (("mem_redis", "Redis source"), ("mem_rabbit", "RabbitMQ source (management)")):
        mm = res.get(key)
        if not mm:
            continue
        s = mm["samples"]
        step = max(1, len(s) // 12)
        shown = s[::step] + ([s[-1]] if (len(s) - 1) % step else [])
        out.append(f"{what}, {mm['queues']:,} queues, RSS (MB) at t (s): "
                   + ", ".join(f"{t:.0f}: {r:.1f}" for t, r in shown) + ".")
        out.append("")
    out.append("![RSS over time](docs/bench-memory.png)")
    return out


def report_growth(growth):
    out = ["", "### 8. Growth", ""]
    out.append("Half lists, half timestamp zsets of the same shape, in their own database; "
               "`max_keys: 1000000` (the default 10,000 would cap them) and "
               "`discovery_interval: 1h`, so the timed window holds only steady polls; discovery "
               "shows in the `once` column. `client_tracking: false`: every key is read on every "
               "poll, as when every queue changes each second (with the default, an unchanged "
               "key is not read at all; see scenario 10). Values are means over the "
               "window's polls (Redis's figures over the polls Redis saw in it: LLEN calls / lists).")
    out.append("")
    out.append("| queue keys | polls | poll | Redis CPU/poll (commandstats) | Redis CPU/poll (`INFO cpu`) | "
               "commands/poll | exporter RSS peak (median) | `once` | Redis CPU of `once` |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for g in growth:
        out.append(f"| {g['keys']:,} | {g['polls']} | {fmt(g['poll_ms'])} | {fmt(g['redis_ms'])} | "
                   f"{fmt(g['redis_cpu_ms'])} | {g['calls']:,.0f} | {fmt(g['rss_mb'], 'MB')} "
                   f"({fmt(g.get('rss_median_mb'), 'MB')}) | "
                   f"{fmt(g['once_ms'])} | {fmt(g['once_redis_ms'])} |")
    out.append("")
    out.append("Per 1,000 keys: " + "; ".join(
        f"{g['keys']:,}: poll {g['poll_ms'] / g['keys'] * 1000:.2f} ms, Redis "
        f"{g['redis_ms'] / g['keys'] * 1000:.2f} ms, RSS {g['rss_mb'] / g['keys'] * 1000:.2f} MB"
        for g in growth) + ".")
    out.append("")
    out.append("![growth](docs/bench-growth.png)")
    return out


def report_zero(zero):
    out = ["", "### 11. Zero config against presets", ""]
    out.append(
        f"{zero['queues']:,} library queues (a fifth each of RQ, Sidekiq, BullMQ, asynq and "
        f"Celery, laid out as the libraries write them: registries, lists, the job hash a "
        f"latency read needs, BullMQ's `meta` hash and `events` stream, a Celery priority "
        f"list) among string keys, {zero['keys']:,} keys in all, in their own database. "
        "Each config runs `once` (a discovery round and a first poll; Redis's commandstats "
        "around it, split into the discovery commands `SCAN`, `SMEMBERS`, `SSCAN`, `SCARD`, `HMGET`, `TYPE` "
        "and the rest), then `serve` with `discovery_interval: 1h` and "
        "`client_tracking: false` (every key read every poll) for steady polls, one window "
        "of polls per config in turn, repeated, so the configs share the machine's load "
        "alike (`INFO cpu` beside commandstats). "
        f"Zero config and the presets report the same series: "
        f"{'yes' if zero['same_series'] else 'NO'} ({zero['series']:,} `queue_depth`/"
        "`queue_paused` lines of `once` compared)"
        + ("" if "same_series_libraries" not in zero else
           f"; zero config with `plain_keys: false` and the presets: "
           f"{'yes' if zero['same_series_libraries'] else 'NO'}") + ".")
    if zero.get("pass_ms"):
        out.append("")
        out.append("One full SCAN pass by itself (`COUNT 1000`, the harness's own client, "
                   "commandstats), by filter — the cost of a pass whatever it filters, since "
                   "Redis visits every key and a filter only drops names from the reply: "
                   + "; ".join(f"{k} {fmt3(spread(v))}" for k, v in zero["pass_ms"].items())
                   + ". Zero config's full round (the first, and one every 10 minutes) makes "
                   "the untyped pass and `TYPE` of every name; a later round the untyped pass "
                   "and `TYPE` of the names it does not remember; the presets make one pass "
                   "(`MATCH bull:*:meta TYPE hash`); `plain_keys: false` makes one (untyped).")
    out.append("")
    out.append("| config | discovery round: Redis CPU (commandstats) | its commands | first poll: "
               "Redis CPU | `once`: Redis CPU (`INFO cpu`) | `once` | steady poll: Redis CPU "
               "(commandstats) | (`INFO cpu`) | commands/poll | tracked |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in zero["rows"]:
        if r.get("rounds_only"):
            continue
        calls = r["discovery_calls"][-1]
        what = ", ".join(f"{k.upper()} {c:,}" for k, c in sorted(calls.items()))
        out.append(f"| {r['config']} | {fmt3(spread(r['discovery_ms']))} | {what} | "
                   f"{fmt(statistics.median(r['first_poll_ms']))} | "
                   f"{fmt3(spread(r.get('once_cpu_ms', [])))} | "
                   f"{fmt(statistics.median(r['once_ms']))} | {fmt3(spread(r['poll_redis_ms']))} | "
                   f"{fmt3(spread(r['poll_cpu_ms']))} | "
                   f"{statistics.median(r['poll_calls']):,.0f} | {r['tracked'] or 0:.0f} |")
    if any(r.get("round_ms") for r in zero["rows"]):
        out.append("")
        out.append("Later discovery rounds: `serve` with `discovery_interval: 3s`, the discovery "
                   "commands between two readings taken right after the exporter counted a round "
                   "(`queue_exporter_discovery_rounds_total`), divided by the rounds between; "
                   "the first (full) round left out.")
        out.append("")
        out.append("| config | a later discovery round: Redis CPU (commandstats) | its commands per round | rounds by kind |")
        out.append("|---|---|---|---|")
        for r in zero["rows"]:
            if not r.get("round_ms"):
                continue
            calls = r["round_calls"][-1]
            what = ", ".join(f"{k.upper()} {c:,.0f}" for k, c in sorted(calls.items()))
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(r["round_kinds"].items()) if n)
            out.append(f"| {r['config']} | {fmt3(spread(r['round_ms']))} | {what} | {kinds} |")
    return out


def report_rabbit(rab):
    out = ["", "### 9. RabbitMQ methods", ""]
    out.append(f"{rab['queues']:,} classic queues with one message each, in a throw-away vhost. "
               "The requests each HTTP method makes were recorded by running `once` through a "
               "logging proxy; curl then GETs the same URLs in order on one connection "
               "(`time_total` summed), one round per second, the exporter's cadence (RabbitMQ "
               "answers more slowly after a second idle than back to back). The curl rounds of an "
               "HTTP method run while its exporter polls, each in the middle of the idle time "
               "between two polls, so both see RabbitMQ in the same state. The AMQP method's raw "
               "rounds (a bare client) run just before its exporter. Poll times come from the "
               "exporter's histogram, `poll_interval: 1s`.")
    out.append("")
    b2b = [(row, row.get("raw_b2b_ms")) for row in rab["rows"]]
    if any(t for _, t in b2b):
        out.append("The same raw rounds back to back (median; the ratio to the poll in brackets): "
                   + "; ".join(
                       f"{row['method']}" + (f" `{row['variant']}`" if row["variant"] else "")
                       + f" {statistics.median(t):.1f} ms "
                       f"({statistics.median(row['poll_ms']) / statistics.median(t):.2f}×)"
                       for row, t in b2b if t) + ".")
        out.append("")
    for row in rab["rows"]:
        reqs = row["requests"]
        shown = reqs if len(reqs) <= 3 else reqs[:2] + [f"… {len(reqs) - 2} more"]
        out.append(f"- {row['method']} {row['variant']}: " + "; ".join(f"`{r}`" for r in shown))
    return out


METHOD_NOTES = [
    "- **Poll time** (1, 9): read from the exporter's own `/metrics` "
    "(`queue_exporter_poll_duration_seconds`), fetched with gzip every 250 ms; whenever `_count` "
    "went up by exactly one, the increase of `_sum` is that poll's duration. Discovery "
    "(every 30 s) is part of the polls it happens in, as in production.",
    "- **Redis CPU per poll / per scrape** (2): the increase of `usec` over all commands in "
    "`INFO commandstats` (the harness's own `INFO` excluded) over whole polls, divided by the polls; "
    "for redis_exporter, around each scrape. `INFO cpu` (used_cpu_user + used_cpu_sys) is also "
    "shown: it includes what commandstats leaves out (network I/O, parsing, the event loop). "
    "Steady-state % = `INFO cpu` increase over the polling window / wall time, minus the idle "
    "server's rate measured before; redis_exporter's is its per-scrape `INFO cpu` increase / 15 s.",
    "- **Peer** (1–3): redis_exporter from Debian (`prometheus-redis-exporter`) with "
    "`-check-keys queue:list:*,queue:zset:*` on the same server and data, each scrape timed "
    "as a whole HTTP GET; scrapes interleave with the exporter's runs.",
    "- **`once`** (3): wall time of the whole process as a user runs it.",
    "- **/metrics** (4): `benches/loadgen.rs http`: 10 tasks GET `/metrics` back to back, "
    "whole body read, with the exporter polling every second (the first scrape after each poll "
    "encodes the new snapshot).",
    "- **gRPC** (5): `benches/loadgen.rs grpc`, using the crate's generated client.",
    "- **Push** (6): `benches/loadgen.rs push`.",
    "- **Memory** (7): VmRSS from `/proc/PID/status` every 0.7 s (off the 1 s poll's phase, so "
    "readings land inside polls as often as polls take time), with a gzip scrape "
    "every 15 s as Prometheus would. Flat: the last quarter's mean is within 5 % (or 1 MB) of "
    "the second quarter's. The duration is `--mem-duration` (the issue asks for 20 minutes: "
    "`scripts/bench --mem-duration 1200`).",
    "- **Growth** (8): linear when the cost of each added key over the last step (50k → 200k) "
    "is at most 1.5× the cost of each added key over the first (1k → 10k); fixed costs (the "
    "process's base RSS) cancel out. RSS is the peak of readings every 70 ms through each "
    "size's window (a poll builds its list while the published one is still served), so "
    "every size is measured alike.",
    "- **RabbitMQ** (9): see section 9. The AMQP method has no HTTP endpoint; its raw row is a "
    "bare lapin client doing the same passive declares on 8 channels of an open connection.",
    "- **Real work** (10): a `Churn` writer thread, on its own connection, picks the share of "
    "the queues at random each second and sends each an add at *now* and a take of the oldest "
    "(see section 10); its own commands are left out of both the exporter's and the peer's "
    "figures. The floor row is `benches/loadgen.rs floor --needed --gap-ms 1000`.",
    "- **Zero config** (11): the library layouts are written key by key (registries, lists, "
    "the job hash a latency read needs, BullMQ's `meta` and `events`, a Celery priority list) "
    "in database 3; `SCAN`, `SMEMBERS`, `SSCAN`, `SCARD`, `HMGET` and `TYPE` of a `once` count as discovery, "
    "the rest as its first poll; steady polls run with `client_tracking: false`.",
    "- Only the release binary and `benches/loadgen.rs` are used; no internal module of the "
    "crate is called (the gRPC client is generated from the same proto).",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin")
    ap.add_argument("--bin-label", default=None, help="how the report names the binary")
    ap.add_argument("--loadgen")
    ap.add_argument("--root", default=".")
    ap.add_argument("--out", required=True, help="the Markdown report")
    ap.add_argument("--plot-dir", required=True)
    ap.add_argument("--json", required=True, help="raw results (written, or read with --report-only)")
    ap.add_argument("--report-only", action="store_true",
                    help="render the report and plots again from --json, without running anything")
    ap.add_argument("--command", default="scripts/bench")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--mem-duration", type=float, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--only", default="", help="comma-separated scenario numbers")
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
    failed = []
    if args.report_only:
        with open(args.json) as f:
            results = json.load(f)
    else:
        results, failed = run(args)
    os.makedirs(args.plot_dir, exist_ok=True)
    stem = "bench"
    pngs = plots(results, args.plot_dir, stem)
    text = report(results, results["meta"])
    # Image links relative to the report.
    rel = os.path.relpath(args.plot_dir, os.path.dirname(os.path.abspath(args.out)))
    text = text.replace("](docs/bench-", f"]({rel}/{stem}-")
    if not pngs:
        text += "\n(matplotlib not available: no plots.)\n"
    if os.path.exists(args.out):
        old = open(args.out).read()
        # The closed loop's sections (closedloop.py, grid.py, measured.py) and plan.py's are kept.
        for start, end in ((CLOSED_LOOP_START, CLOSED_LOOP_END), (GRID_START, GRID_END),
                           (MEASURED_START, MEASURED_END), (PLAN_START, PLAN_END)):
            if start in old and end in old:
                kept = old.split(start, 1)[1].split(end, 1)[0]
                text = text.rstrip("\n") + "\n\n" + start + kept + end + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    log(f"wrote {args.out}" + (f", {', '.join(pngs)}" if pngs else ""))
    if failed:
        log(f"failed scenarios: {', '.join(failed)}")
        sys.exit(1)


def run(args):
    """Runs the scenarios; returns the results (with their meta data) and
    the scenarios that failed. The raw results are written to --json."""
    if not (args.bin and args.loadgen):
        sys.exit("--bin and --loadgen are required (or --report-only)")
    p = SMOKE if args.smoke else FULL
    if args.runs:
        p["runs"] = args.runs
    if args.mem_duration is None:
        args.mem_duration = 3.0 if args.smoke else 120.0
    version = subprocess.run([args.bin, "--version"], capture_output=True,
                             text=True).stdout.strip()
    started = datetime.datetime.now(datetime.timezone.utc)
    rev = git_rev(args.root)

    def stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    bench = Bench(args)
    try:
        bench.run()
    finally:
        for c in reversed(CLEANUPS):
            try:
                c()
            except Exception:  # noqa: BLE001 - best effort
                pass
        for proc in CHILDREN:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(bench.work, ignore_errors=True)
    results = bench.results
    results["meta"] = dict(
        smoke=args.smoke, p=p, command=args.command, binary=args.bin_label or args.bin,
        version=version, rev=rev, started=f"{started:%Y-%m-%d %H:%M}",
        minutes=(time.time() - started.timestamp()) / 60, machine=machine(),
        redis_version=getattr(bench, "redis_version", ""), peer_version=bench.peer_version,
        rabbit_version=bench.rabbit_version, zset_encoding=getattr(bench, "zset_encoding", "?"),
        notes=bench.notes, failed=bench.failed)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1, default=str)
    log(f"wrote {args.json}")
    return results, bench.failed


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Which source files one zero-config discovery round passes through, in
order (issue 37: "discovery becomes one-way"; BENCHMARKS.md, "Discovery's
path through its files").

    python3 scripts/bench.d/oneway.py BINARY [BINARY...] [--show]

Seeds a small zero-config keyspace (two queues each of RQ, Sidekiq, BullMQ,
asynq and Celery, a few plain keys and strings) into a private
redis-server, then runs `BINARY once` under gdb (a debug build: the symbols
and line tables are what it reads). Every function of the crate whose first
instruction lies in one of ROUND_FILES gets a breakpoint that records the
file and continues; recording runs from `RedisSource::discover`'s first
entry until the first poll reads a key (`poll::poll_keys`), so the trace is
one round and its adoption, nothing of the poll. Closures and async bodies
count as entries of the file they are written in (an async body is entered
again each time it is resumed), so a file re-entered after an await is
re-entered in the count too.

From the entries, in order: a stay is a run of entries in one file (entries
in files not listed are skipped, not a break: a library's own file, the
leaves `keyname`, `reply`, `cmd`); a return is a stay in a file that had a
stay before. Printed per binary: stays, files, returns, the returns per
file, and the same counted over named functions only (no closure or async
body, whose entries depend on awaits), and, where the tree has zero
config's stage files, the steps back between them (an entry into gather or
classify after a later stage's file was entered). `--show` prints the
stays in order.
Deterministic for one binary and keyspace up to how awaits land (a page that
is ready at once is no re-entry): runs of one binary differ by a few
returns at most.
"""
import argparse, json, os, re, socket, subprocess, sys, tempfile, time

# The files a zero-config round may run through: the ten of issue 37's
# count, then the stage files that replace them (a file absent from a tree
# is skipped).
ROUND_FILES = [
    "src/sources/redis/rounds.rs",
    "src/sources/redis/discovery.rs",
    "src/sources/redis/commands.rs",
    "src/sources/redis/presets/rounds.rs",
    "src/sources/redis/presets/library_round.rs",
    "src/sources/redis/presets/recognise.rs",
    "src/sources/redis/presets/consumed.rs",
    "src/sources/redis/presets/picture.rs",
    "src/sources/redis/presets/remembered.rs",
    "src/sources/redis/presets/bounded.rs",
    "src/sources/redis/presets/zero/mod.rs",
    "src/sources/redis/presets/zero/gather.rs",
    "src/sources/redis/presets/zero/classify.rs",
    "src/sources/redis/presets/zero/adopt.rs",
    "src/sources/redis/presets/zero/scan.rs",
    "src/sources/redis/presets/zero/libraries.rs",
]

START = "queue_exporter::sources::redis::RedisSource::discover"
STOP = "queue_exporter::sources::redis::poll::poll_keys"


def in_gdb():
    """Runs inside gdb: breakpoints on ROUND_FILES' functions, the trace
    written as JSON lines to $ONEWAY_OUT."""
    import gdb
    binary = gdb.current_progspace().filename
    syms, main_addr = [], None
    for line in subprocess.check_output(["nm", "-C", binary], text=True).splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 3 or parts[1] not in "tT":
            continue
        if parts[2] == "main":
            main_addr = int(parts[0], 16)
        elif "queue_exporter::" in parts[2]:
            syms.append((int(parts[0], 16), parts[2]))
    wanted = {}
    for addr, name in syms:
        sal = gdb.find_pc_line(addr)
        f = sal.symtab.filename if sal.symtab else ""
        for r in ROUND_FILES:
            if f.endswith(r):
                wanted[addr] = (r, name)
    marks = {a: n for a, n in syms if n == START or n.startswith(STOP)}
    out = open(os.environ["ONEWAY_OUT"], "w")
    state = {"on": False, "done": False}

    class Entry(gdb.Breakpoint):
        def __init__(self, where, file, name):
            super().__init__(where, internal=True)
            self.file, self.fname = file, name

        def stop(self):
            if self.fname == START and not state["done"]:
                state["on"] = True
            if self.fname.startswith(STOP) and state["on"]:
                state["on"], state["done"] = False, True
            if state["on"] and self.file:
                out.write(json.dumps([self.file, self.fname]) + "\n")
            return False

    gdb.execute("set pagination off")
    gdb.execute("set breakpoint pending on")
    gdb.execute("set print thread-events off")
    gdb.execute("break main")
    gdb.execute("run")
    base = int(gdb.parse_and_eval("(long)&main")) - main_addr
    gdb.execute("delete")
    for addr, (file, name) in wanted.items():
        Entry(f"*{base + addr:#x}", file, name)
    for addr, name in marks.items():
        if addr not in wanted:
            Entry(f"*{base + addr:#x}", "", name)
    gdb.execute("set breakpoint always-inserted on")
    gdb.execute("continue")
    out.close()


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def seed(port):
    import redis
    r = redis.Redis(port=port, db=3); now = time.time()
    p = r.pipeline(transaction=False)
    for i in range(2):
        p.sadd("rq:queues", "rq:queue:rq%d" % i); p.rpush("rq:queue:rq%d" % i, "j1", "j2")
        p.sadd("queues", "sk%d" % i); p.lpush("queue:sk%d" % i, '{"enqueued_at":%.3f}' % now)
        p.hset("bull:b%d:meta" % i, mapping={"opts.maxLenEvents": "10000", "version": "bullmq:6.7.0"})
        p.lpush("bull:b%d:wait" % i, "1"); p.xadd("bull:b%d:events" % i, {"event": "added"})
        p.sadd("asynq:queues", "a%d" % i); p.lpush("asynq:{a%d}:pending" % i, "x")
        p.sadd("_kombu.binding.celery", b"c%d\x06\x16\x06\x16c%d" % (i, i)); p.lpush("c%d" % i, "m")
    p.lpush("plain:list", "x"); p.zadd("plain:zset", {"m": now}); p.xadd("plain:stream", {"f": "v"})
    for j in range(20):
        p.set("cache:%d" % j, "v")
    p.execute()
    return r.dbsize()


# Zero config's stages, in the order a round runs them (after the
# restructure): an entry into one after a later one was entered is a step
# back.
STAGES = {"src/sources/redis/presets/zero/gather.rs": 1,
          "src/sources/redis/presets/zero/classify.rs": 2,
          "src/sources/redis/presets/zero/adopt.rs": 3}


def steps_back(events):
    """Entries into a stage file after a later stage's file was entered."""
    top, back = 0, 0
    for file, _ in events:
        rank = STAGES.get(file)
        if rank is None:
            continue
        back += rank < top
        top = max(top, rank)
    return back


def measure(events, named_only=False):
    """Stays and returns of a trace (see the module comment)."""
    stays, seen, returns, per_file = [], set(), 0, {}
    for file, name in events:
        if named_only and "{{closure}}" in name:
            continue
        if stays and stays[-1] == file:
            continue
        if file in seen:
            returns += 1
            per_file[file] = per_file.get(file, 0) + 1
        seen.add(file)
        stays.append(file)
    return stays, seen, returns, per_file


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binaries", nargs="+"); ap.add_argument("--show", action="store_true")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="qe-oneway-"); port = free_port()
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                           stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                import redis
                redis.Redis(port=port).ping(); break
            except Exception:
                time.sleep(0.1)
        print(f"seeded {seed(port)} keys", flush=True)
        cfg = os.path.join(work, "c.yaml")
        open(cfg, "w").write(
            "listen: { grpc: null }\nsources:\n  - name: main\n    type: redis\n"
            f"    url: redis://127.0.0.1:{port}/3\n    poll_interval: 1s\n    discovery_interval: 1h\n"
            "    timeout: 900s\n    client_tracking: false\n")
        for binary in a.binaries:
            trace = os.path.join(work, "trace.jsonl")
            env = dict(os.environ, ONEWAY_OUT=trace, RUST_LOG="off")
            subprocess.run(["gdb", "-batch", "-nx", "-x", os.path.abspath(__file__), "--args",
                            binary, "once", "--config", cfg],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
            events = [tuple(json.loads(l)) for l in open(trace)]
            if any(f in STAGES for f, _ in events):
                print(f"{binary} | steps back between zero config's stages: {steps_back(events)}", flush=True)
            for label, named in (("every entry", False), ("named functions only", True)):
                stays, files, returns, per_file = measure(events, named)
                short = {f: f.replace("src/sources/redis/", "") for f in files}
                print(f"{binary} | {label}: {len(events) if not named else sum('{{closure}}' not in n for _, n in events)} entries, "
                      f"{len(stays)} stays in {len(files)} files, {returns} returns to a file already left | "
                      + ", ".join(f"{short[f]} {n}" for f, n in sorted(per_file.items(), key=lambda x: -x[1])),
                      flush=True)
                if a.show and not named:
                    print("  " + " > ".join(short[s] for s in stays))
    finally:
        srv.terminate(); srv.wait()


if __name__ == "__main__":
    try:
        import gdb  # noqa: F401
        in_gdb()
    except ImportError:
        main()

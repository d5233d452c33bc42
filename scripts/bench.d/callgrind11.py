#!/usr/bin/env python3
"""Scenario 11 in Redis instructions (BENCHMARKS.md, "Scenario 11 in Redis
instructions"): what a first discovery round and poll (`queue-exporter once`)
costs Redis, counted by valgrind's callgrind, which counts the same for the
same work however loaded the machine is (commandstats' microseconds do not).

    python3 scripts/bench.d/callgrind11.py BINARY [BINARY...] [--queues 1000 --keys 999800]

Seeds scenario 11's data (bench.py `seed_zero`'s layout) into a private
redis-server, saves it, restarts it under callgrind with instrumentation off,
and for each binary and config switches it on around one `once`. Prints
instructions and the commands sent (`INFO commandstats`) per run. Needs
valgrind and redis-py; read-only towards the server but for the seeding."""
import argparse, glob, os, re, socket, subprocess, sys, tempfile, time

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def cli(port, *args):
    return subprocess.check_output(["redis-cli", "-p", str(port), *map(str, args)], stderr=subprocess.DEVNULL).decode()

def wait_up(port):
    for _ in range(1200):
        try:
            # PING answers an error (LOADING) until the data is in.
            if "loading:0" in cli(port, "INFO", "persistence") and cli(port, "PING").strip() == "PONG":
                return
        except subprocess.CalledProcessError: pass
        time.sleep(0.5)
    sys.exit("redis-server did not come up")

def seed(port, queues, total):
    import redis
    r = redis.Redis(port=port, db=3); n = queues // 5; now = time.time()
    iso = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(now - 60))
    ms, ns = "%d" % int((now - 60) * 1000), "%d" % int((now - 60) * 1e9)
    job = '{"class":"Worker","enqueued_at":%.3f}' % (now - 60)
    p = r.pipeline(transaction=False)
    for i in range(n):
        ids = ["%d" % j for j in range(10)]
        p.sadd("rq:queues", "rq:queue:rq%d" % i); p.rpush("rq:queue:rq%d" % i, *["rq%d-%s" % (i, j) for j in ids])
        p.hset("rq:job:rq%d-0" % i, "enqueued_at", iso)
        p.sadd("queues", "sk%d" % i); p.lpush("queue:sk%d" % i, *[job] * 10)
        p.hset("bull:b%d:meta" % i, mapping={"opts.maxLenEvents": "10000", "version": "bullmq:6.7.0"})
        p.lpush("bull:b%d:wait" % i, *ids); p.hset("bull:b%d:0" % i, "timestamp", ms)
        p.xadd("bull:b%d:events" % i, {"event": "added"})
        p.sadd("asynq:queues", "a%d" % i); p.lpush("asynq:{a%d}:pending" % i, *["a%d-%s" % (i, j) for j in ids])
        p.hset("asynq:{a%d}:t:a%d-0" % (i, i), "pending_since", ns)
        p.sadd("_kombu.binding.celery", b"c%d\x06\x16\x06\x16c%d" % (i, i))
        p.lpush("c%d" % i, *["m"] * 10); p.lpush(b"c%d\x06\x163" % i, "m")
    p.execute()
    for start in range(0, max(0, total - (4 + n * 12)), 10000):
        p = r.pipeline(transaction=False)
        for j in range(start, min(start + 10000, total - (4 + n * 12))): p.set("cache:%d" % j, "v")
        p.execute()
    return r.dbsize()

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binaries", nargs="+"); ap.add_argument("--queues", type=int, default=1000)
    ap.add_argument("--keys", type=int, default=999800); a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="qe-callgrind11-"); port = free_port()
    base = ["--port", str(port), "--dir", work, "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no"]
    srv = subprocess.Popen(["redis-server", *base], stdout=subprocess.DEVNULL); wait_up(port)
    print(f"seeded {seed(port, a.queues, a.keys):,} keys", flush=True); cli(port, "SAVE"); srv.terminate(); srv.wait()
    out = os.path.join(work, "cg.out.%p")
    vg = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                           "redis-server", *base], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_up(port)
    head = ("listen: { grpc: null }\nsources:\n  - name: main\n    type: redis\n"
            f"    url: redis://127.0.0.1:{port}/3\n    poll_interval: 1s\n    discovery_interval: 1h\n"
            "    max_keys: 100000\n    timeout: 900s\n    client_tracking: false\n")
    celery = ", ".join(f"c{i}" for i in range(a.queues // 5))
    presets = ("    queues:\n      - preset: rq\n      - preset: sidekiq\n      - preset: bullmq\n"
               f"      - preset: asynq\n      - preset: celery\n        queues: [{celery}]\n")
    configs = {"presets": head + presets, "zero config": head, "plain_keys: false": head + "    plain_keys: false\n"}
    try:
        for binary in a.binaries:
            for label, body in configs.items():
                cfg = os.path.join(work, "c.yaml"); open(cfg, "w").write(body)
                cli(port, "CONFIG", "RESETSTAT"); before = set(glob.glob(os.path.join(work, "cg.out.*")))
                subprocess.check_call(["callgrind_control", "-i", "on", str(vg.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                run = subprocess.run([binary, "once", "--config", cfg], capture_output=True)
                subprocess.check_call(["callgrind_control", "-i", "off", str(vg.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                stats = dict(re.findall(r"cmdstat_([^:]+):calls=(\d+)", cli(port, "INFO", "commandstats")))
                subprocess.check_call(["callgrind_control", "-d", str(vg.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
                dump = sorted(set(glob.glob(os.path.join(work, "cg.out.*"))) - before, key=os.path.getmtime)[-1]
                ir = next(int(l.split()[1]) for l in open(dump) if l.startswith("totals:"))
                stats.pop("config|resetstat", None); stats.pop("info", None)
                print(f"{binary} | {label} | {ir:,} instructions | once rc {run.returncode} | "
                      + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())), flush=True)
    finally:
        vg.terminate(); vg.wait()

if __name__ == "__main__":
    main()

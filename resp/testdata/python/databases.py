"""Connects redis-py with redis://.../1 URLs (and protocol=3 where redis-py
has it), runs a WATCH transaction with redis-py's transaction helper, and,
where Python's limits is installed, a fixed window limiter over
redis://.../1; prints each result, one per line, for TestPythonDatabases."""
import sys

import redis

port = int(sys.argv[1])
base = "redis://127.0.0.1:%d" % port


def run(name, **kw):
    one = redis.Redis.from_url(base + "/1", **kw)
    zero = redis.Redis.from_url(base + "/0", **kw)
    one.set(name, "one")
    print(name + ".db1", one.get(name))
    print(name + ".db0", zero.get(name))
    print(name + ".incrbyfloat", one.incrbyfloat(name + ":f", 2.5))

    def bump(pipe):
        v = float(pipe.get(name + ":f"))
        pipe.multi()
        pipe.set(name + ":f", v * 2)

    print(name + ".transaction", one.transaction(bump, name + ":f"))
    print(name + ".after", one.get(name + ":f"))
    # A WATCH raced by another connection: EXEC fails, redis-py raises.
    with one.pipeline() as pipe:
        pipe.watch(name)
        one.set(name, "changed")
        pipe.multi()
        pipe.set(name, "tx")
        try:
            pipe.execute()
            print(name + ".raced", "ran")
        except redis.WatchError:
            print(name + ".raced", "WatchError")
    print(name + ".value", one.get(name))
    print(name + ".dbsize", one.dbsize(), zero.dbsize())
    one.flushdb()
    one.close()
    zero.close()


run("default")
if int(redis.__version__.split(".")[0]) >= 5:
    run("resp3", protocol=3)

try:
    import limits
except ImportError:
    print("limits missing")
    sys.exit(0)
from limits import parse, storage, strategies

s = storage.storage_from_string(base + "/1")
limiter = strategies.FixedWindowElasticExpiryRateLimiter(s)
item = parse("2/minute")
print("limits.hits", [limiter.hit(item, "user") for _ in range(3)])
print("limits.test", limiter.test(item, "user"))
zero = redis.Redis.from_url(base + "/0")
one = redis.Redis.from_url(base + "/1")
print("limits.dbsize", one.dbsize(), zero.dbsize())

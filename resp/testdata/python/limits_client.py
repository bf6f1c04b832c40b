"""Runs Python's limits (Debian's python3-limits: RedisStorage over
redis-py, whose register_script sends EVALSHA, then SCRIPT LOAD and EVALSHA
again after NOSCRIPT) against the server on the port given, and prints each
outcome, one per line, for the tests to compare between sluice and
redis-server: the fixed window and its elastic-expiry variant (the
incr_expire script, INCRBY/EXPIRE), the moving window (two scripts on a
list) when the second argument is "moving", and the storage's reset (the
clear_keys script). Reset times are printed in tens of seconds, rounded up:
the two servers' clocks differ by the milliseconds between the runs."""

import logging
import math
import sys
import time

from limits import parse
from limits.storage import RedisClusterStorage, RedisStorage
from limits.strategies import (FixedWindowElasticExpiryRateLimiter,
                               FixedWindowRateLimiter, MovingWindowRateLimiter)

port = int(sys.argv[1])
# "cluster": the server is a cluster (the script leaves out reset, which runs
# KEYS in a script); "clusterclient": also use limits' RedisClusterStorage
# (redis-py's cluster client).
cluster = len(sys.argv) > 3 and sys.argv[3] in ("cluster", "clusterclient")
if len(sys.argv) > 3 and sys.argv[3] == "clusterclient":
    # redis-py's cluster client logs each error reply (NOSCRIPT included,
    # which register_script then handles) through logging: keep them off
    # the outcomes.
    logging.disable(logging.CRITICAL)
    storage = RedisClusterStorage(f"redis+cluster://127.0.0.1:{port}")
else:
    storage = RedisStorage(f"redis://127.0.0.1:{port}")
strategies = [("fixed", FixedWindowRateLimiter), ("elastic", FixedWindowElasticExpiryRateLimiter)]
if len(sys.argv) > 2 and sys.argv[2] == "moving":
    strategies.append(("moving", MovingWindowRateLimiter))
if not cluster:
    print("reset", storage.reset() >= 0)


def stats(limiter, item, *ids):
    reset, remaining = limiter.get_window_stats(item, *ids)
    return f"remaining={remaining} reset={math.ceil((reset - time.time()) / 10)}"


seed = 31
for name, cls in strategies:
    limiter = cls(storage)
    for item in (parse("5/hour"), parse("3 per 2 hours"), parse("2/day")):
        for who in ("alice", "bob"):
            limiter.clear(item, who)
            outcomes = []
            for i in range(7):
                seed = (seed * 1103515245 + 12345) % 2147483648
                cost = 1 + (seed >> 16) % 2
                outcomes.append(f"{int(limiter.hit(item, who, cost=cost))}/{cost}")
            print(name, item, who, " ".join(outcomes), "test", limiter.test(item, who), stats(limiter, item, who))
    if name != "moving":
        limiter.clear(parse("5/hour"), "carol")
        print(name, "script flush", bool(storage.storage.script_flush()))
        print(name, "after flush", limiter.hit(parse("5/hour"), "carol"), stats(limiter, parse("5/hour"), "carol"))
if not cluster:
    print("reset", storage.reset())

"""Connects redis-py with its default settings and prints each reply, one
per line, for TestPythonClient to compare. With RESP3 support (redis-py 5
and later) it also connects with protocol=3."""
import sys

import redis

port = int(sys.argv[1])


def run(name, **kw):
    r = redis.Redis(host="127.0.0.1", port=port, **kw)
    print(name + ".ping", r.ping())
    print(name + ".token", r.execute_command("RL.TOKEN", name + ":1", "10", "1/s"))
    print(name + ".peek", r.execute_command("RL.PEEK", "nothing"))
    print(name + ".throttle", r.execute_command("CL.THROTTLE", name + ":c", "15", "30", "60"))
    try:
        r.execute_command("RL.TOKEN", name + ":1", "ten", "1/s")
    except redis.ResponseError as e:
        print(name + ".error", e)
    r.close()


run("default")
if int(redis.__version__.split(".")[0]) >= 5:
    run("resp3", protocol=3)

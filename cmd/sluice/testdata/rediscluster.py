# redis-py's RedisCluster with its defaults against a sluice cluster:
# it reads CLUSTER SLOTS from the seed, COMMAND for key positions, and
# routes RL.TOKEN by its key. Prints one line per check: the node count,
# then for each key given (one per slot range, with several shards) its
# slot as redis-py computes it, RL.TOKEN's reply, and the server's slot.
import sys

from redis.cluster import RedisCluster

host, port, keys = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rc = RedisCluster(host=host, port=port)
print("nodes", len(rc.get_nodes()))
for key in keys:
    print("slot", rc.keyslot(key))
    print("token", rc.execute_command("RL.TOKEN", key, "100", "1/h"))
    print("keyslot", rc.execute_command("CLUSTER", "KEYSLOT", key))
rc.close()

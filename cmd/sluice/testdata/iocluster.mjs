// ioredis's Cluster with its defaults against a sluice cluster: it reads
// CLUSTER SLOTS, waits for cluster_state:ok in CLUSTER INFO, and routes
// RL.TOKEN (a command it does not know, so keyless to it: sent to a random
// master) and a known keyed command. Prints one line per check, as JSON:
// the masters and all nodes it knows, then for each key given (io:key when
// none; one per slot range with several shards) RL.TOKEN's reply and
// EXISTS.
import Redis from 'ioredis';

const [host, port] = [process.argv[2], Number(process.argv[3])];
const keys = process.argv.length > 4 ? process.argv.slice(4) : ['io:key'];
const out = (name, v) => console.log(name + ' ' + JSON.stringify(v));

const c = new Redis.Cluster([{ host, port }]);
await new Promise((resolve, reject) => { c.once('ready', resolve); c.once('error', reject); });
out('masters', c.nodes('master').length);
out('all', c.nodes('all').length);
for (const key of keys) {
  out('token', await c.call('RL.TOKEN', key, '10', '1/h'));
  out('exists', await c.exists(key));
}
c.disconnect();

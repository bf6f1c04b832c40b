// ioredis's Cluster with its defaults against a sluice cluster: it reads
// CLUSTER SLOTS, waits for cluster_state:ok in CLUSTER INFO, and routes
// RL.TOKEN (a command it does not know, so keyless to it: sent to a random
// master) and a known keyed command. Prints one line per check, as JSON.
import Redis from 'ioredis';

const [host, port] = [process.argv[2], Number(process.argv[3])];
const out = (name, v) => console.log(name + ' ' + JSON.stringify(v));

const c = new Redis.Cluster([{ host, port }]);
await new Promise((resolve, reject) => { c.once('ready', resolve); c.once('error', reject); });
out('masters', c.nodes('master').length);
out('all', c.nodes('all').length);
out('token', await c.call('RL.TOKEN', 'io:key', '10', '1/h'));
out('exists', await c.exists('io:key'));
c.disconnect();

// Connects ioredis and node-redis with their default settings (RESP3 by
// default; node-redis has no RESP2 fallback) and prints each reply as JSON,
// one per line, for TestNodeClients to compare.
import Redis from 'ioredis';
import { createClient } from 'redis';

const port = Number(process.argv[2]);
const out = (name, v) => console.log(name + ' ' + JSON.stringify(v));

const io = new Redis({ port, host: '127.0.0.1', lazyConnect: true });
await io.connect();
out('ioredis.token', await io.call('RL.TOKEN', 'io:1', '10', '1/s'));
out('ioredis.peek', await io.call('RL.PEEK', 'nothing'));
out('ioredis.throttle', await io.call('CL.THROTTLE', 'io:c', '15', '30', '60'));
io.disconnect();

const nr = createClient({ socket: { port, host: '127.0.0.1' } });
await nr.connect();
out('node-redis.token', await nr.sendCommand(['RL.TOKEN', 'nr:1', '10', '1/s']));
out('node-redis.peek', await nr.sendCommand(['RL.PEEK', 'nothing']));
out('node-redis.proto', (await nr.sendCommand(['HELLO'])).proto);
await nr.quit();

// Runs rate-limiter-flexible's RateLimiterRedis (its Lua script, which
// ioredis's defineCommand sends as EVAL on a new connection, EVALSHA after,
// EVAL again after NOSCRIPT) against the server on the port given, and
// prints each outcome, one per line, for the tests to compare between sluice
// and redis-server. A seeded sequence of consume, penalty, reward, get,
// delete, with SCRIPT FLUSH now and then. Times are printed in whole
// seconds, rounded up: the two servers' clocks differ by the milliseconds
// between the runs. A second argument "cluster" uses ioredis's cluster
// client, "node-redis" node-redis instead of ioredis.
import Redis from 'ioredis';
import { createClient } from 'redis';
import { RateLimiterRedis } from 'rate-limiter-flexible';

const port = Number(process.argv[2]);
const mode = process.argv[3];
// "cluster": ioredis's cluster client, given one node (it reads CLUSTER
// SLOTS); "node-redis": node-redis (RESP3), with which the limiter sends
// EVAL every time.
let io;
if (mode === 'node-redis') {
  io = createClient({ socket: { port, host: '127.0.0.1' } });
  io.script = (what) => io.sendCommand(['SCRIPT', what]);
  io.disconnect = () => io.quit();
} else {
  io = mode === 'cluster'
    ? new Redis.Cluster([{ port, host: '127.0.0.1' }], { lazyConnect: true })
    : new Redis({ port, host: '127.0.0.1', lazyConnect: true, enableOfflineQueue: true });
}
await io.connect();
for (let i = 0; i < 4; i++) await io.del(`rlflxlua:user${i}`);
for (let i = 0; i < 4; i++) await io.del(`rlflxlua{t}:user${i}`);
const useRedisPackage = mode === 'node-redis';
const limiters = [
  new RateLimiterRedis({ storeClient: io, useRedisPackage, keyPrefix: 'rlflxlua', points: 5, duration: 1000 }),
  new RateLimiterRedis({ storeClient: io, useRedisPackage, keyPrefix: 'rlflxlua{t}', points: 3, duration: 3600 }),
];
const secs = (ms) => (ms < 0 ? ms : Math.ceil(ms / 1000));
const show = (what, r) => console.log(what, r === null ? 'null'
  : `consumed=${r.consumedPoints} remaining=${r.remainingPoints} next=${secs(r.msBeforeNext)} first=${r.isFirstInDuration}`);

let seed = 31;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return (seed >>> 16) % n; };
for (let i = 0; i < 150; i++) {
  const l = limiters[rnd(2)];
  const key = `user${rnd(4)}`;
  const what = `${i} ${l.keyPrefix}:${key}`;
  switch (rnd(12)) {
    case 0: show(`${what} penalty`, await l.penalty(key, 1)); break;
    case 1: show(`${what} reward`, await l.reward(key, 1)); break;
    case 2: show(`${what} get`, await l.get(key)); break;
    case 3: console.log(`${what} delete`, await l.delete(key)); break;
    case 4: console.log(`${what} script flush`, await io.script('FLUSH')); break;
    default:
      try {
        show(`${what} consume`, await l.consume(key, 1 + rnd(2)));
      } catch (r) {
        if (r instanceof Error) throw r;
        show(`${what} rejected`, r);
      }
  }
}
console.log('ttl', await io.ttl('rlflxlua:user1') > 900, 'type', await io.type('rlflxlua:user1'));
io.disconnect();
process.exit(0); // the limiter's timers would hold the process for seconds

// Runs rate-limiter-flexible's RateLimiterRedisNonAtomic (MULTI GET PTTL
// EXEC, SET k v EX s, SET k v + PEXPIRE) over ioredis against the server
// on the port given, and prints each outcome, one per line, for
// TestRateLimiterFlexible to compare between sluice and redis-server.
// Times are printed in whole seconds, rounded up: the two servers' clocks
// differ by the milliseconds between the runs.
import Redis from 'ioredis';
import { RateLimiterRedisNonAtomic } from 'rate-limiter-flexible';

const port = Number(process.argv[2]);
const io = new Redis({ port, host: '127.0.0.1', lazyConnect: true, enableOfflineQueue: true });
await io.connect();
await io.flushall();
const limiter = new RateLimiterRedisNonAtomic({ storeClient: io, keyPrefix: 'rlflx', points: 5, duration: 100 });
const secs = (ms) => (ms < 0 ? ms : Math.ceil(ms / 1000));
const show = (what, r) => console.log(what, r === null ? 'null'
  : `consumed=${r.consumedPoints} remaining=${r.remainingPoints} next=${secs(r.msBeforeNext)}`);

for (let i = 1; i <= 7; i++) {
  try {
    show(`consume ${i}`, await limiter.consume('user1'));
  } catch (r) {
    if (r instanceof Error) throw r;
    show(`rejected ${i}`, r);
  }
}
show('consume 2 points', await limiter.consume('user2', 2));
show('get', await limiter.get('user2'));
show('get absent', await limiter.get('nobody'));
show('penalty', await limiter.penalty('user2', 1));
show('reward', await limiter.reward('user2', 2));
show('set', await limiter.set('user3', 4, 50));
show('get set', await limiter.get('user3'));
show('block', await limiter.block('user4', 30));
try {
  await limiter.consume('user4');
} catch (r) {
  if (r instanceof Error) throw r;
  show('blocked', r);
}
console.log('delete', await limiter.delete('user1'), await limiter.delete('user1'));
console.log('ttl', await io.ttl('rlflx:user2'), 'type', await io.type('rlflx:user2'));
io.disconnect();
process.exit(0); // the limiter's timers would hold the process for seconds

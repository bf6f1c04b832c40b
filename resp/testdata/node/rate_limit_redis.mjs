// Runs express-rate-limit with rate-limit-redis's RedisStore (SCRIPT LOAD of
// its two scripts at start, EVALSHA, SCRIPT LOAD again after NOSCRIPT) over
// ioredis against the server on the port given, serving an Express app on
// 127.0.0.1, and prints each request's status and RateLimit headers and the
// store's get, one per line, for the tests to compare between sluice and
// redis-server. Reset times are printed in whole seconds, rounded up. A
// second argument "cluster" uses ioredis's cluster client.
import Redis from 'ioredis';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { RedisStore } from 'rate-limit-redis';

const port = Number(process.argv[2]);
// "cluster": ioredis's cluster client, given one node (it reads CLUSTER
// SLOTS), under the store's sendCommandCluster.
const cluster = process.argv[3] === 'cluster';
const io = cluster
  ? new Redis.Cluster([{ port, host: '127.0.0.1' }], { lazyConnect: true })
  : new Redis({ port, host: '127.0.0.1', lazyConnect: true, enableOfflineQueue: true });
await io.connect();
for (const k of ['rl:alice', 'rl:bob', 'rl:carol', 'rl{f}:dave']) await io.del(k);
const store = (prefix) => new RedisStore(cluster
  ? { sendCommandCluster: ({ command }) => io.call(...command), prefix }
  : { sendCommand: (command, ...args) => io.call(command, ...args), prefix });
const limiter = rateLimit({ windowMs: 1000 * 1000, limit: 3, standardHeaders: 'draft-6', legacyHeaders: false,
  store: store('rl:'), keyGenerator: (req) => req.query.who });
const lenient = rateLimit({ windowMs: 3600 * 1000, limit: 2, standardHeaders: 'draft-6', legacyHeaders: false,
  skipFailedRequests: true, store: store('rl{f}:'), keyGenerator: (req) => req.query.who });
const app = express();
app.get('/a', limiter, (req, res) => res.send('ok'));
app.get('/f', lenient, (req, res) => res.status(req.query.fail ? 500 : 200).send('done'));
const server = app.listen(0, '127.0.0.1');
await new Promise((resolve) => server.once('listening', resolve));
const base = `http://127.0.0.1:${server.address().port}`;
const hit = async (path) => {
  const r = await fetch(base + path);
  await r.text();
  console.log(path, r.status, 'limit', r.headers.get('ratelimit-limit'), 'remaining', r.headers.get('ratelimit-remaining'),
    'reset', r.headers.get('ratelimit-reset') === null ? null : Math.ceil(Number(r.headers.get('ratelimit-reset')) / 10));
};
const info = async (l, key) => {
  const s = await l.getKey(key);
  console.log('get', key, s === undefined ? 'undefined' : `hits=${s.totalHits} resetsIn=${Math.ceil((s.resetTime - Date.now()) / 10000)}`);
};
for (let i = 0; i < 5; i++) await hit('/a?who=alice');
await hit('/a?who=bob');
await info(limiter, 'alice');
await info(limiter, 'carol');
console.log('script flush', await io.script('FLUSH'));
await hit('/a?who=bob');
await info(limiter, 'bob');
await limiter.resetKey('alice');
await hit('/a?who=alice');
for (const fail of ['', '1', '1', '', '', '']) await hit(`/f?who=dave${fail ? '&fail=1' : ''}`);
await info(lenient, 'dave');
console.log('ttl', await io.ttl('rl:bob') > 900, 'type', await io.type('rl:bob'));
server.closeAllConnections();
server.close();
io.disconnect();

// Connects ioredis with a redis://.../1 URL and prints each reply as JSON,
// one per line, for TestNodeDatabases to compare: database 1 apart from
// database 0, INCRBYFLOAT, and a WATCH transaction raced by another
// connection (EXEC replies null).
import Redis from 'ioredis';

const port = Number(process.argv[2]);
const out = (name, v) => console.log(name + ' ' + JSON.stringify(v));

const one = new Redis(`redis://127.0.0.1:${port}/1`);
const zero = new Redis(`redis://127.0.0.1:${port}/0`);
await one.set('io', 'one');
out('ioredis.db1', await one.get('io'));
out('ioredis.db0', await zero.get('io'));
out('ioredis.incrbyfloat', await one.incrbyfloat('io:f', '2.5'));
await one.watch('io:f');
out('ioredis.exec', await one.multi().incrbyfloat('io:f', '0.25').exec());
await one.watch('io');
await zero.select(1);
await zero.set('io', 'raced');
out('ioredis.raced', await one.multi().set('io', 'tx').exec());
out('ioredis.value', await one.get('io'));
out('ioredis.dbsize', [await one.dbsize(), await zero.select(0).then(() => zero.dbsize())]);
await one.flushdb();
one.disconnect();
zero.disconnect();

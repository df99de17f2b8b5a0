// The BullMQ side of bgjobs' batch-join benchmark: `batches` flows of
// `size` no-op children each, a parent per flow that runs once all its
// children are done; children/s including the parents, on the same Redis
// and at the same concurrency as bgjobs. Prints one JSON line.
//
//   node flows.mjs <redis-url> <batches> <size> <concurrency> <clients>
import { FlowProducer, Worker } from 'bullmq';
import IORedis from 'ioredis';

const [url, batches, size, concurrency, clients] = process.argv.slice(2);
const nBatches = Number(batches), nSize = Number(size);
const u = new URL(url);
const connection = {
  host: u.hostname, port: Number(u.port || 6379), db: Number(u.pathname.slice(1) || 0),
  maxRetriesPerRequest: null,
};
const prefix = 'benchbull' + Math.random().toString(16).slice(2, 10);
const opts = { connection, prefix, concurrency: Number(concurrency) };

let parentsDone = 0;
let finish;
const finished = new Promise((resolve) => { finish = resolve; });
const child = new Worker('child', async () => 'ok', opts);
const parent = new Worker('parent', async () => 'joined', opts);
parent.on('completed', () => { if (++parentsDone === nBatches) finish(); });
await child.waitUntilReady();
await parent.waitUntilReady();
const flow = new FlowProducer({ connection, prefix });

const children = () => Array.from({ length: nSize }, () => ({ name: 'noop', queueName: 'child', data: { text: 'm' } }));
const start = performance.now();
let next = 0;
// As many flows in flight at once as bgjobs has HTTP clients.
await Promise.all(Array.from({ length: Math.min(Number(clients), nBatches) }, async () => {
  while (next < nBatches) {
    next++;
    await flow.add({ name: 'join', queueName: 'parent', children: children() });
  }
}));
await finished;
const elapsed = performance.now() - start;
console.log(JSON.stringify({ elapsed_ms: elapsed, children: nBatches * nSize, parents: parentsDone }));

await Promise.all([child.close(), parent.close(), flow.close()]);
const rdb = new IORedis(connection);
let cursor = '0';
do {
  const [c, keys] = await rdb.scan(cursor, 'MATCH', prefix + ':*', 'COUNT', 1000);
  cursor = c;
  if (keys.length) await rdb.unlink(...keys);
} while (cursor !== '0');
await rdb.quit();

// Drives rate-limiter-flexible's RateLimiterRedis through ioredis against
// the server at HOST:PORT and prints one line per operation (consume,
// penalty, reward, block, get, delete), then `<name>: N passed, M failed`.
// The expected values are rate-limiter-flexible's documented results for a
// limiter of 5 points per 10 seconds; run.sh runs this against redis-server
// 7 and against Leasehold. Usage: node run.js HOST PORT NAME
'use strict';

const Redis = require('ioredis');
const { RateLimiterRedis, RateLimiterRes } = require('rate-limiter-flexible');

const [host, port, name] = [process.argv[2] || '127.0.0.1', Number(process.argv[3] || 7379), process.argv[4] || 'server'];

function expect(cond, what) {
  if (!cond) throw new Error(what);
}

// A rejection is a RateLimiterRes when the limit is reached, an Error when
// the store failed: show the second as it is.
async function rejected(promise) {
  try {
    const res = await promise;
    return { res };
  } catch (err) {
    if (err instanceof RateLimiterRes) return { limited: err };
    throw err;
  }
}

const checks = [
  ['consume', async (rl) => {
    const r1 = await rl.consume('user', 1);
    expect(r1.consumedPoints === 1 && r1.remainingPoints === 4, `first consume: ${JSON.stringify(r1)}`);
    const r2 = await rl.consume('user', 4);
    expect(r2.consumedPoints === 5 && r2.remainingPoints === 0, `consume 4: ${JSON.stringify(r2)}`);
    const over = await rejected(rl.consume('user', 1));
    expect(over.limited && over.limited.remainingPoints === 0 && over.limited.msBeforeNext > 0,
      `consume over the limit: ${JSON.stringify(over)}`);
  }],
  ['penalty', async (rl) => {
    const r = await rl.penalty('p', 3);
    expect(r.consumedPoints === 3, `penalty 3: ${JSON.stringify(r)}`);
  }],
  ['reward', async (rl) => {
    await rl.penalty('r', 3);
    const r = await rl.reward('r', 2);
    expect(r.consumedPoints === 1, `reward 2 after penalty 3: ${JSON.stringify(r)}`);
  }],
  ['block', async (rl) => {
    const r = await rl.block('b', 5);
    expect(r.msBeforeNext > 4000 && r.msBeforeNext <= 5000, `block 5 s: ${JSON.stringify(r)}`);
    const over = await rejected(rl.consume('b', 1));
    expect(over.limited !== undefined, `consume while blocked: ${JSON.stringify(over)}`);
  }],
  ['get', async (rl) => {
    await rl.consume('g', 2);
    const r = await rl.get('g');
    expect(r && r.consumedPoints === 2 && r.remainingPoints === 3 && r.msBeforeNext > 0, `get: ${JSON.stringify(r)}`);
    const none = await rl.get('nobody');
    expect(none === null, `get of an unknown key: ${JSON.stringify(none)}`);
  }],
  ['delete', async (rl) => {
    await rl.consume('d', 1);
    const deleted = await rl.delete('d');
    expect(deleted === true, `delete: ${deleted}`);
    const gone = await rl.get('d');
    expect(gone === null, `get after delete: ${JSON.stringify(gone)}`);
    const again = await rl.delete('d');
    expect(again === false, `delete of a missing key: ${again}`);
  }],
];

async function main() {
  const redis = new Redis({ host, port, maxRetriesPerRequest: 1, enableOfflineQueue: true, lazyConnect: false });
  redis.on('error', () => {});
  await redis.flushall();
  const rl = new RateLimiterRedis({ storeClient: redis, points: 5, duration: 10, keyPrefix: 'compat' });
  let passed = 0;
  let failed = 0;
  for (const [op, check] of checks) {
    try {
      await check(rl);
      passed += 1;
      console.log(`${name} ${op}: pass`);
    } catch (err) {
      failed += 1;
      console.log(`${name} ${op}: FAIL (${String(err && err.message ? err.message : err).split('\n')[0]})`);
    }
  }
  console.log(`${name}: ${passed} passed, ${failed} failed`);
  redis.disconnect();
}

main().catch((err) => {
  console.log(`${name}: 0 passed, ${checks.length} failed (${err.message})`);
  process.exit(0);
});

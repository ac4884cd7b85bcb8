// ioredis's Cluster client against a Leasehold cluster, run by
// server/tests/cluster_clients.rs: `node cluster.js PORT KEY...` connects
// through the node on 127.0.0.1:PORT, works on each KEY (one per group,
// chosen by the test) and prints one line per result, `name value`, the
// value as JSON; the test compares them. Exits 1 on an unexpected error,
// 2 when it has not finished within 20 s.
//
// ioredis finds a command's keys in its own table of Redis commands
// (@ioredis/commands); TOKENLEASE and SLIDINGWINDOW are not in it, so
// `call` sends them to some node and follows its -MOVED.
"use strict";
const Redis = require("ioredis");

const [port, ...keys] = process.argv.slice(2);
const say = (name, value) => console.log(`${name} ${JSON.stringify(value)}`);

setTimeout(() => {
  console.error("ioredis: not finished within 20 s");
  process.exit(2);
}, 20000).unref();

async function main() {
  const cluster = new Redis.Cluster([{ host: "127.0.0.1", port: Number(port) }], {
    slotsRefreshTimeout: 2000,
    redisOptions: { connectTimeout: 2000 },
  });
  await new Promise((resolve, reject) => {
    cluster.once("ready", resolve);
    cluster.once("error", reject);
  });
  say("masters", cluster.nodes("master").length);
  say("replicas", cluster.nodes("slave").length);
  for (const [g, key] of keys.entries()) {
    say(`set ${g}`, await cluster.set(key, `v${g}`));
    say(`get ${g}`, await cluster.get(key));
    say(`incr ${g}`, [await cluster.incr(`{${key}}:n`), await cluster.incr(`{${key}}:n`)]);
    // 10 tokens, 1 an hour: three leases of 4 grant, grant, deny.
    const lease = [];
    for (let i = 0; i < 3; i++) {
      const [granted, remaining, retry] = await cluster.call(
        "TOKENLEASE", `{${key}}:tb`, 10, 1, 3600000, 4);
      lease.push([granted, remaining, retry > 0]);
    }
    say(`tokenlease ${g}`, lease);
    // A limit of 2 hits a minute: admitted, admitted, denied.
    const window = [];
    for (let i = 0; i < 3; i++) {
      const [admitted, count] = await cluster.call("SLIDINGWINDOW", `{${key}}:sw`, 2, 60000);
      window.push([admitted, count]);
    }
    say(`slidingwindow ${g}`, window);
  }
  say("mset", await cluster.mset("{user1}:a", "1", "{user1}:b", "2"));
  say("mget", await cluster.mget("{user1}:a", "{user1}:b"));
  try {
    // ioredis routes by the first key: the server judges the others.
    await cluster.mset("a", "1", "b", "2");
    say("crossslot", null);
  } catch (e) {
    say("crossslot", e.message);
  }
  await cluster.quit();
}

main().catch((e) => {
  console.error("ioredis:", e);
  process.exit(1);
});

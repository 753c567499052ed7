// Browser tests of the nsqadmin UI (node:test + playwright-core driving Debian's chromium).
// Env: NSQADMIN_URL (http://host:port), NSQD_HTTP (host:port), NSQD_TCP (host:port, optional),
// SCREENSHOT_DIR; for the Replication page REPL_ADMIN_URL (an nsqadmin over the replicating
// pair and NSQD_HTTP), REPL_NSQD_HTTP and REPL_NSQD_TCP (the pair, `a,b`; optional: without
// them that test is skipped). Started by run.sh, which also starts the daemons.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const ADMIN = process.env.NSQADMIN_URL;
const NSQD = process.env.NSQD_HTTP;
const NSQD_TCP = process.env.NSQD_TCP || '';
const SHOTS = process.env.SCREENSHOT_DIR || 'target/nsqadmin-screenshots';
const REPL_ADMIN = process.env.REPL_ADMIN_URL || '';
const REPL_HTTP = (process.env.REPL_NSQD_HTTP || '').split(',').filter(Boolean);
const REPL_TCP = (process.env.REPL_NSQD_TCP || '').split(',').filter(Boolean);
assert.ok(ADMIN && NSQD, 'NSQADMIN_URL and NSQD_HTTP must be set');
fs.mkdirSync(SHOTS, { recursive: true });

let browser; // the persistent browser context
let profile;
let consumer;

async function nsqd(method, p, body) {
  const r = await fetch(`http://${NSQD}${p}`, { method, body });
  const text = await r.text();
  assert.equal(r.status, 200, `${method} ${p}: ${text}`);
  return text;
}

async function stats(addr = NSQD) {
  const r = await fetch(`http://${addr}/stats?format=json`);
  const text = await r.text();
  assert.equal(r.status, 200, `GET ${addr}/stats: ${text}`);
  return JSON.parse(text);
}

function topicOf(s, t) { return (s.topics || []).find((x) => x.topic_name === t); }
function channelOf(s, t, c) { const tt = topicOf(s, t); return tt && tt.channels.find((x) => x.channel_name === c); }
const num = (text) => { const m = String(text).replace(/,/g, '').match(/-?\d+/); return m ? Number(m[0]) : NaN; };

async function publish(topic, n) {
  for (let i = 0; i < n; i++) { await nsqd('POST', `/pub?topic=${topic}`, `msg ${i}`); }
}

async function page(width = 1280, height = 900) {
  const p = await browser.newPage();
  await p.setViewportSize({ width, height });
  p.on('pageerror', (e) => { throw e; });
  return p;
}

async function shot(p, name) {
  await p.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

async function until(fn, what, ms = 15000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) { return last; }
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.fail(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

before(async () => {
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'nsqadmin-chromium-'));
  // A fresh --user-data-dir: playwright passes it for a persistent context.
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  await nsqd('POST', '/topic/create?topic=orders');
  await nsqd('POST', '/channel/create?topic=orders&channel=billing');
  await nsqd('POST', '/channel/create?topic=orders&channel=archive');
  await nsqd('POST', '/topic/create?topic=clicks');
  await publish('orders', 7);
  await publish('clicks', 3);
  if (NSQD_TCP) {
    // A consumer holding one message in flight, so the channel page lists a client.
    const [host, port] = [NSQD_TCP.slice(0, NSQD_TCP.lastIndexOf(':')), Number(NSQD_TCP.slice(NSQD_TCP.lastIndexOf(':') + 1))];
    consumer = net.connect(port, host);
    await new Promise((r) => consumer.once('connect', r));
    consumer.on('data', () => {});
    consumer.write('  V2SUB orders billing\nRDY 1\n');
    await until(async () => (channelOf(await stats(), 'orders', 'billing') || {}).in_flight_count === 1, 'in-flight message');
  }
});

after(async () => {
  if (consumer) { consumer.destroy(); }
  if (browser) { await browser.close(); }
  fs.rmSync(profile, { recursive: true, force: true });
});

test('topics page lists every topic and the cluster charts', async () => {
  const p = await page();
  await p.goto(ADMIN + '/');
  await p.waitForSelector('#topics-table');
  const names = await p.$$eval('#topics-table tbody tr', (rows) => rows.map((r) => r.dataset.topic));
  assert.deepEqual(names, ['clicks', 'orders']);
  assert.equal(await p.textContent('h2'), 'Topics');
  await p.waitForSelector('#cluster-charts figure.chart');
  await shot(p, 'topics-1280');
  await p.close();
});

test('topic page numbers match nsqd /stats', async () => {
  const p = await page();
  await p.goto(ADMIN + '/');
  await p.click('#topics-table a:text("orders")');
  await p.waitForSelector('#topic-nodes');
  assert.equal(new URL(p.url()).pathname, '/topics/orders');
  const s = await stats();
  const t = topicOf(s, 'orders');
  const total = p.locator('#topic-nodes tr.total');
  assert.equal(num(await total.locator('[data-field=depth]').textContent()), t.depth);
  assert.equal(num(await total.locator('[data-field=message_count]').textContent()), t.message_count);
  assert.equal(num(await total.locator('[data-field=channels]').textContent()), t.channels.length);
  const rows = await p.locator('#topic-nodes tbody tr[data-node]:not(.total)').count();
  assert.equal(rows, 1);
  for (const c of t.channels) {
    const row = p.locator(`#topic-channels tr[data-channel="${c.channel_name}"]`);
    assert.equal(num(await row.locator('[data-field=depth]').textContent()), c.depth, c.channel_name);
    assert.equal(num(await row.locator('[data-field=in_flight_count]').textContent()), c.in_flight_count);
    assert.equal(num(await row.locator('[data-field=message_count]').textContent()), c.message_count);
    assert.equal(num(await row.locator('[data-field=client_count]').textContent()), c.client_count);
  }
  await p.waitForSelector('#topic-charts figure.chart[data-metric=depth]');
  await shot(p, 'topic-1280');
  await p.close();
});

test('channel page shows its numbers and clients; pause/unpause reach nsqd', async () => {
  const p = await page();
  await p.goto(ADMIN + '/topics/orders');
  await p.click('#topic-channels a:text("billing")');
  await p.waitForSelector('#channel-nodes');
  const c = channelOf(await stats(), 'orders', 'billing');
  const total = p.locator('#channel-nodes tr.total');
  assert.equal(num(await total.locator('[data-field=depth]').textContent()), c.depth);
  assert.equal(num(await total.locator('[data-field=in_flight_count]').textContent()), c.in_flight_count);
  assert.equal(num(await total.locator('[data-field=message_count]').textContent()), c.message_count);
  if (NSQD_TCP) {
    assert.equal(await p.locator('#channel-clients tbody tr').count(), 1);
  }
  await shot(p, 'channel-1280');

  // Pause, confirm in the modal.
  await p.click('button[data-action=pause]');
  await p.waitForSelector('dialog#confirm[open]');
  assert.match(await p.textContent('#confirm-text'), /Are you sure you want to pause billing\?/);
  await shot(p, 'channel-confirm-pause');
  await p.click('#confirm-ok');
  await until(async () => channelOf(await stats(), 'orders', 'billing').paused === true, 'nsqd reports paused');
  await p.waitForSelector('button[data-action=unpause]');
  await p.waitForSelector('#channel-nodes .label:text("paused")');
  await shot(p, 'channel-paused');

  // Cancel leaves it paused; then unpause.
  await p.click('button[data-action=unpause]');
  await p.click('dialog#confirm button[value=cancel]');
  assert.equal(channelOf(await stats(), 'orders', 'billing').paused, true);
  await p.click('button[data-action=unpause]');
  await p.click('#confirm-ok');
  await until(async () => channelOf(await stats(), 'orders', 'billing').paused === false, 'nsqd reports unpaused');
  await p.waitForSelector('button[data-action=pause]');
  await p.close();
});

test('nodes, node and counter pages agree with nsqd', async () => {
  const s = await stats();
  const p = await page();
  await p.goto(ADMIN + '/nodes');
  await p.waitForSelector('#nodes-table');
  assert.equal(await p.textContent('h2'), 'NSQd Nodes (1)');
  const nodeRow = p.locator('#nodes-table tbody tr');
  assert.equal(await nodeRow.count(), 1);
  assert.equal(num(await nodeRow.locator('.badge').textContent()), s.topics.length);
  await shot(p, 'nodes-1280');
  await nodeRow.locator('a[data-link]').first().click();
  await p.waitForSelector('#node-topics');
  const totalMessages = s.topics.reduce((a, t) => a + t.message_count, 0);
  assert.equal(num(await p.textContent('[data-field=total_messages]')), totalMessages);
  await shot(p, 'node-1280');

  await p.goto(ADMIN + '/counter');
  const processed = s.topics.reduce((a, t) => a + t.channels.reduce((b, c) => b + c.message_count, 0), 0);
  await until(async () => num(await p.getAttribute('#counter', 'data-total')) === processed, 'counter total');
  assert.equal(await p.textContent('.counter-caption'), 'Messages Processed');
  await shot(p, 'counter-1280');
  await p.close();
});

test('create a topic from the UI, then delete it', async () => {
  const p = await page();
  await p.goto(ADMIN + '/lookup');
  await p.waitForSelector('#create-form');
  await p.fill('#create-topic', 'ui_created');
  await p.fill('#create-channel', 'ui_channel');
  await p.click('#create-form button[type=submit]');
  await until(async () => channelOf(await stats(), 'ui_created', 'ui_channel'), 'topic and channel on nsqd');
  await shot(p, 'lookup-1280');

  await p.goto(ADMIN + '/');
  await p.click('#topics-table a:text("ui_created")');
  await p.waitForSelector('button[data-action=delete]');
  await p.click('button[data-action=delete]');
  assert.match(await p.textContent('#confirm-text'), /delete ui_created/);
  await p.click('#confirm-ok');
  await until(async () => !topicOf(await stats(), 'ui_created'), 'topic deleted on nsqd');
  await p.waitForURL(ADMIN + '/');
  await p.waitForSelector('#topics-table');
  const names = await p.$$eval('#topics-table tbody tr', (rows) => rows.map((r) => r.dataset.topic));
  assert.ok(!names.includes('ui_created'));
  await p.close();
});

test('charts update after publishing', async () => {
  const p = await page();
  await p.goto(ADMIN + '/topics/clicks');
  const chart = '#topic-charts figure.chart[data-metric=rate]';
  await p.waitForSelector(chart);
  const pointsBefore = Number(await p.getAttribute(chart, 'data-points'));
  await publish('clicks', 50);
  const last = await until(async () => {
    const v = await p.getAttribute(chart, 'data-last');
    return v !== '' && Number(v) > 0 ? Number(v) : null;
  }, 'a positive message rate in the chart');
  assert.ok(last > 0);
  const pointsAfter = Number(await p.getAttribute(chart, 'data-points'));
  assert.ok(pointsAfter > pointsBefore, `points ${pointsBefore} -> ${pointsAfter}`);
  const depth = '#topic-charts figure.chart[data-metric=depth]';
  assert.ok(Number(await p.getAttribute(depth, 'data-points')) > 0);
  await shot(p, 'topic-chart-after-publish');
  await p.close();
});

test('phone width (390 px): no page-level horizontal overflow', async () => {
  const p = await page(390, 844);
  for (const [route, sel, name] of [['/', '#topics-table', 'topics-390'], ['/topics/orders', '#topic-nodes', 'topic-390'],
    ['/topics/orders/billing', '#channel-nodes', 'channel-390'], ['/nodes', '#nodes-table', 'nodes-390'],
    ['/replication', '#replication-nodes', 'replication-390']]) {
    await p.goto(ADMIN + route);
    await p.waitForSelector(sel);
    const overflow = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `${route} overflows by ${overflow}px`);
    await shot(p, name);
  }
  await p.close();
});

test('an API error is shown in a red box', async () => {
  const p = await page();
  await p.goto(ADMIN + '/topics/does_not_exist');
  await p.waitForSelector('.view-error');
  assert.match(await p.textContent('.view-error'), /UPSTREAM_ERROR: failed to query any nsqd/);
  await shot(p, 'error-1280');
  await p.close();
});

test('replication page without replication: the node is listed "off"', async () => {
  const p = await page();
  await p.goto(ADMIN + '/');
  await p.click('nav a[data-nav=replication]');
  await p.waitForSelector('#replication-nodes');
  assert.equal(new URL(p.url()).pathname, '/replication');
  assert.equal(await p.getAttribute('nav a[data-nav=replication]', 'class'), 'active');
  const rows = p.locator('#replication-nodes tbody tr');
  assert.equal(await rows.count(), 1);
  assert.equal(await rows.first().getAttribute('data-node'), NSQD);
  assert.equal((await rows.first().locator('[data-field=state]').textContent()).trim(), 'off');
  assert.match(await p.textContent('main'), /No node has replication on/);
  assert.match(await p.textContent('main'), /No node holds a replica backlog/);
  await shot(p, 'replication-off-1280');
  await p.close();
});

test('replication page: a row per node, the backlogs each holds', { skip: REPL_HTTP.length !== 2 && 'no replicating pair' }, async () => {
  const [a, b] = REPL_HTTP;
  // Both linked to their replica before publishing: 3 messages to A, 2 to B.
  for (const n of [a, b]) {
    await until(async () => ((await stats(n)).replication.peers || [])
      .some((x) => x.in_replica_set && x.state === 'connected'), `${n}'s replica linked`);
  }
  for (const [n, count] of [[a, 3], [b, 2]]) {
    for (let i = 0; i < count; i++) {
      const r = await fetch(`http://${n}/pub?topic=replicated`, { method: 'POST', body: `m${i}` });
      assert.equal(r.status, 200, await r.text());
    }
  }
  const sa = (await stats(a)).replication;
  const sb = (await stats(b)).replication;

  const p = await page();
  await p.goto(REPL_ADMIN + '/replication');
  await p.waitForSelector('#replication-nodes');
  const nodes = await p.$$eval('#replication-nodes tbody tr', (rows) => rows.map((r) => r.dataset.node));
  assert.deepEqual(nodes, [a, b, NSQD]);
  assert.match(await p.textContent('[data-field=replicating]'), /^2 Replicating$/);
  for (const [n, s, peerTcp] of [[a, sa, REPL_TCP[1]], [b, sb, REPL_TCP[0]]]) {
    const row = p.locator(`#replication-nodes tr[data-node="${n}"]`);
    const field = async (f) => (await row.locator(`[data-field=${f}]`).textContent()).trim();
    assert.equal(await field('node_id'), s.node_id);
    assert.equal(num(await field('epoch')), s.epoch);
    assert.equal(num(await field('replicas')), 2);
    assert.equal(await field('fenced'), 'no');
    assert.equal(await field('replica_set'), peerTcp);
    assert.equal(await field('peers'), '1 / 1');
    assert.ok(num(await field('lag_frames')) >= 0);
    assert.equal(num(await field('publish_failures')), 0);
    assert.equal(num(await field('takeovers')), 0);
  }
  assert.equal((await p.locator(`#replication-nodes tr[data-node="${NSQD}"] [data-field=state]`).textContent()).trim(), 'off');

  // B holds A's 3 messages, A holds B's 2; the origin cell names the origin's node.
  for (const [holder, hs, origin, os, count] of [[b, sb, a, sa, 3], [a, sa, b, sb, 2]]) {
    const held = hs.backlogs.find((x) => x.origin === os.node_id);
    assert.ok(held, `${holder} holds ${origin}'s backlog: ${JSON.stringify(hs.backlogs)}`);
    const row = p.locator(`#replication-backlogs tr[data-holder="${holder}"][data-origin="${os.node_id}.${os.epoch}"]`);
    assert.equal(await row.count(), 1);
    assert.equal(num(await row.locator('[data-field=messages]').textContent()), count);
    assert.equal(num(await row.locator('[data-field=bytes]').textContent()), held.bytes);
    assert.equal(num(await row.locator('[data-field=last_seq]').textContent()), held.last_seq);
    assert.equal((await row.locator('[data-field=state]').textContent()).trim(), 'replicating');
    const originCell = row.locator('[data-field=origin]');
    assert.match(await originCell.textContent(), new RegExp(os.node_id));
    assert.equal(await originCell.locator('a').getAttribute('href'), `/nodes/${encodeURIComponent(origin)}`);
  }
  await shot(p, 'replication-1280');

  // The origin's link leads to its node page and its Replication panel.
  await p.locator(`#replication-backlogs tr[data-holder="${b}"] [data-field=origin] a`).click();
  await p.waitForSelector('#node-replication');
  assert.equal(new URL(p.url()).pathname, `/nodes/${encodeURIComponent(a)}`);
  assert.equal((await p.textContent('#node-replication [data-field=fenced]')).trim(), 'Not Fenced');
  await p.close();
});

// ---- queue settings, counters and peek (ours) -----------------------------------------------

// A V2 consumer of topic/channel on host:port (default: NSQD_TCP), ready for `rdy` messages.
async function consumerOn(topic, channel, rdy = 1, addr = NSQD_TCP) {
  const i = addr.lastIndexOf(':');
  const s = net.connect(Number(addr.slice(i + 1)), addr.slice(0, i));
  await new Promise((r) => s.once('connect', r));
  s.on('data', () => {});
  s.write(`  V2SUB ${topic} ${channel}\nRDY ${rdy}\n`);
  return s;
}

async function nsqdJSON(p, addr = NSQD) {
  const r = await fetch(`http://${addr}${p}`);
  const text = await r.text();
  assert.equal(r.status, 200, `GET ${p}: ${text}`);
  return JSON.parse(text);
}

const cell = async (p, key, field) => (await p.textContent(`#settings-table tr[data-key=${key}] [data-field=${field}]`)).trim();

test('settings: shown on the channel and topic pages, edited through the form, kept after a reload', async () => {
  await nsqd('POST', '/topic/create?topic=queues');
  await nsqd('POST', '/channel/create?topic=queues&channel=q1');
  await publish('queues', 3);
  const p = await page();
  await p.goto(ADMIN + '/topics/queues/q1');
  await p.waitForSelector('#settings-table');
  assert.equal(await cell(p, 'ttl', 'source'), 'off');
  assert.equal(await cell(p, 'max_attempts', 'value'), '–');

  await p.fill('#setting-ttl', '10m');
  await p.fill('#setting-max_attempts', '5');
  await p.click('#settings-form button[type=submit]');
  await until(async () => (await cell(p, 'ttl', 'value')) === '10m0s', 'the saved ttl in the table');
  const own = await nsqdJSON('/channel/config?topic=queues&channel=q1');
  assert.deepEqual(own.settings.ttl, { source: 'set', value: '10m0s' });
  assert.deepEqual(own.settings.max_attempts, { source: 'set', value: 5 });

  await p.reload();
  await p.waitForSelector('#settings-table');
  assert.equal(await cell(p, 'ttl', 'value'), '10m0s');
  assert.equal(await cell(p, 'ttl', 'source'), 'set here');
  assert.equal(await cell(p, 'max_attempts', 'value'), '5');
  assert.equal(await p.inputValue('#setting-ttl'), '10m0s');
  await shot(p, 'channel-settings-1280');

  // nsqd's refusal is shown as the other actions' errors are; nothing changes.
  await p.fill('#setting-ttl', 'soon');
  await p.click('#settings-form button[type=submit]');
  await p.waitForSelector('#alerts .alert-danger');
  assert.match(await p.textContent('#alerts .alert-danger'), /INVALID_TTL/);
  assert.deepEqual((await nsqdJSON('/channel/config?topic=queues&channel=q1')).settings.ttl, { source: 'set', value: '10m0s' });

  // The topic's: max_depth set, then the channel shows the topic's ttl once its own is cleared.
  await p.goto(ADMIN + '/topics/queues');
  await p.waitForSelector('#settings-table');
  assert.equal(await cell(p, 'max_depth', 'source'), 'off');
  await p.fill('#setting-max_depth', '1000');
  await p.fill('#setting-ttl', '1h');
  await p.click('#settings-form button[type=submit]');
  await until(async () => (await cell(p, 'max_depth', 'value')) === '1000', 'the saved max_depth');
  await p.reload();
  await p.waitForSelector('#settings-table');
  assert.equal(await cell(p, 'max_depth', 'value'), '1000');
  assert.equal(await cell(p, 'ttl', 'value'), '1h0m0s');
  await shot(p, 'topic-settings-1280');
  await p.goto(ADMIN + '/topics/queues/q1');
  await p.waitForSelector('#settings-form');
  await p.fill('#setting-ttl', '');
  await p.click('#settings-form button[type=submit]');
  await until(async () => (await cell(p, 'ttl', 'source')) === 'from topic', 'the topic\'s ttl on the channel');
  assert.equal(await cell(p, 'ttl', 'value'), '1h0m0s');
  await p.close();
});

test('peek lists the queued messages and leaves the channel as it was', async () => {
  const before = channelOf(await stats(), 'queues', 'q1');
  assert.equal(before.depth, 3);
  const p = await page();
  await p.goto(ADMIN + '/topics/queues/q1');
  await p.waitForSelector('#peek-btn');
  await p.click('#peek-btn');
  await p.waitForSelector('#peek-table');
  const rows = p.locator('#peek-table tbody tr');
  assert.equal(await rows.count(), 3);
  assert.equal((await rows.first().locator('[data-field=preview]').textContent()).trim(), 'msg 0');
  assert.equal((await rows.first().locator('[data-field=state]').textContent()).trim(), 'queued');
  assert.equal(num(await rows.first().locator('[data-field=attempts]').textContent()), 0);
  assert.match(await rows.first().locator('[data-field=timestamp]').textContent(), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/);
  await shot(p, 'channel-peek-1280');
  const after = channelOf(await stats(), 'queues', 'q1');
  assert.equal(after.depth, before.depth);
  assert.equal(after.in_flight_count, 0);
  // A consumer's message shows in flight.
  await p.goto(ADMIN + '/topics/orders/billing');
  await p.click('#peek-btn');
  await p.waitForSelector('#peek-table');
  const states = await p.$$eval('#peek-table [data-field=state]', (cs) => cs.map((c) => c.textContent.trim()));
  if (NSQD_TCP) { assert.ok(states.includes('in_flight'), JSON.stringify(states)); }
  await p.close();
});

test('a channel named config is an ordinary channel page; settings and peek use their own paths', async () => {
  await nsqd('POST', '/topic/create?topic=named');
  await nsqd('POST', '/channel/create?topic=named&channel=config');
  await publish('named', 2);
  const p = await page();
  const apiPaths = [];
  p.on('request', (r) => { const u = new URL(r.url()); if (u.pathname.startsWith('/api/')) { apiPaths.push(u.pathname); } });
  await p.goto(ADMIN + '/topics/named/config');
  await p.waitForSelector('#channel-nodes');
  await p.waitForSelector('#settings-table');
  assert.equal(num(await p.locator('#channel-nodes tr.total [data-field=depth]').textContent()), 2);
  await p.click('#peek-btn');
  await p.waitForSelector('#peek-table');
  assert.equal(await p.locator('#peek-table tbody tr').count(), 2);
  assert.ok(apiPaths.includes('/api/topics/named/config'), JSON.stringify(apiPaths));
  assert.ok(apiPaths.includes('/api/settings/named/config'), JSON.stringify(apiPaths));
  assert.ok(apiPaths.includes('/api/peek/named/config'), JSON.stringify(apiPaths));
  // Pause reaches nsqd's channel `config`.
  await p.click('button[data-action=pause]');
  await p.waitForSelector('dialog#confirm[open]');
  await p.click('#confirm-ok');
  await until(async () => channelOf(await stats(), 'named', 'config').paused === true, 'nsqd reports config paused');
  await p.waitForSelector('button[data-action=unpause]');
  // The topic page's settings come from /api/settings/named.
  await p.goto(ADMIN + '/topics/named');
  await p.waitForSelector('#settings-table');
  assert.ok(apiPaths.includes('/api/settings/named'), JSON.stringify(apiPaths));
  await p.close();
});

test('peek on a node without --http-peek says it is off', { skip: REPL_HTTP.length !== 2 && 'no replicating pair' }, async () => {
  const [a] = REPL_HTTP;
  for (const q of ['/topic/create?topic=peekoff', '/channel/create?topic=peekoff&channel=c']) {
    const r = await fetch(`http://${a}${q}`, { method: 'POST' });
    assert.equal(r.status, 200, await r.text());
  }
  const p = await page();
  await p.goto(REPL_ADMIN + '/topics/peekoff/c');
  await p.click('#peek-btn');
  await p.waitForSelector(`[data-peek-node="${a}"]`);
  assert.match(await p.textContent(`[data-peek-node="${a}"]`), /peek is off on this node/);
  assert.equal(await p.locator('#peek-table').count(), 0);
  await p.close();
});

test('expired messages are counted on the channel and topic pages', { skip: !NSQD_TCP && 'no nsqd TCP address' }, async () => {
  await nsqd('POST', '/channel/create?topic=queues&channel=expiring');
  await nsqd('POST', '/channel/config?topic=queues&channel=expiring&ttl=1ms');
  const p = await page();
  await p.goto(ADMIN + '/topics/queues');
  await p.waitForSelector('#topic-channels');
  // No counter columns while nothing expired (NSQ's table), and no "Given up" chart.
  assert.equal(await p.locator('#topic-channels [data-field=expired_count]').count(), 0);
  await p.waitForSelector('#topic-charts figure.chart[data-metric=depth]');
  assert.equal(await p.locator('#topic-charts figure.chart[data-metric=given_up]').count(), 0);
  // A history sample of the channel before the expiry, so the chart has a rate.
  await until(async () => {
    const h = await (await fetch(ADMIN + '/api/history/topics/queues/expiring')).json();
    return (h.samples || []).length > 0;
  }, 'a history sample of the channel');
  await publish('queues', 1);
  await new Promise((r) => setTimeout(r, 20));
  const c = await consumerOn('queues', 'expiring');
  try {
    await until(async () => (channelOf(await stats(), 'queues', 'expiring') || {}).expired_count === 1, 'nsqd counts the expired message');
  } finally {
    c.destroy();
  }
  await p.goto(ADMIN + '/topics/queues/expiring');
  await p.waitForSelector('#queue-counters');
  assert.equal(num(await p.textContent('#queue-counters [data-field=expired_count]')), 1);
  assert.equal(num(await p.textContent('#channel-nodes tr.total [data-field=expired_count]')), 1);
  assert.equal(await p.locator('#queue-counters [data-field=dropped_count]').count(), 0);
  // The history (--history-interval=1s) records the expiry: the "Given up" chart appears.
  const givenUp = '#channel-charts figure.chart[data-metric=given_up]';
  await p.waitForSelector(givenUp, { timeout: 15000 });
  assert.match(await p.textContent(givenUp + ' figcaption'), /Given up \(msgs\/s\)/);
  assert.deepEqual(await p.locator(givenUp + ' .legend-item').allTextContents(), ['expired', 'dead-lettered', 'dropped']);
  assert.ok(Number(await p.getAttribute(givenUp, 'data-points')) > 0);
  const h = await (await fetch(ADMIN + '/api/history/topics/queues/expiring')).json();
  assert.ok(h.samples.some((x) => x.expired_rate > 0), JSON.stringify(h.samples));
  assert.equal(h.samples[h.samples.length - 1].expired, 1);
  await shot(p, 'channel-counters-1280');
  await p.goto(ADMIN + '/topics/queues');
  await p.waitForSelector('#topic-channels');
  assert.equal(num(await p.textContent('#topic-channels tr[data-channel=expiring] [data-field=expired_count]')), 1);
  assert.equal(num(await p.textContent('#topic-channels tr[data-channel=q1] [data-field=expired_count]')), 0);
  // The topic's chart sums its channels.
  await p.waitForSelector('#topic-charts figure.chart[data-metric=given_up]');
  await p.close();
});

// A consumer of topic/channel on NSQD_TCP that requeues (REQ ... 0) every message it gets;
// with the channel's max_attempts=1 each is dead-lettered.
async function requeuer(topic, channel, rdy) {
  const i = NSQD_TCP.lastIndexOf(':');
  const s = net.connect(Number(NSQD_TCP.slice(i + 1)), NSQD_TCP.slice(0, i));
  await new Promise((r) => s.once('connect', r));
  let buf = Buffer.alloc(0);
  s.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 8 && buf.length >= 4 + buf.readUInt32BE(0)) {
      const size = buf.readUInt32BE(0);
      const kind = buf.readUInt32BE(4);
      const data = buf.subarray(8, 4 + size);
      buf = buf.subarray(4 + size);
      if (kind === 2) { s.write(`REQ ${data.subarray(10, 26).toString('latin1')} 0\n`); }
    }
  });
  s.write(`  V2SUB ${topic} ${channel}\nRDY ${rdy}\n`);
  return s;
}

test('peek shows a dead letter\'s origin; Redrive moves it back', { skip: !NSQD_TCP && 'no nsqd TCP address' }, async () => {
  for (const q of ['/topic/create?topic=jobs', '/channel/create?topic=jobs&channel=work',
    '/topic/create?topic=jobs_dlq', '/channel/create?topic=jobs_dlq&channel=held',
    '/channel/config?topic=jobs&channel=work&max_attempts=1&dead_letter_topic=jobs_dlq']) {
    await nsqd('POST', q);
  }
  await nsqd('POST', '/pub?topic=jobs', 'job 1');
  await nsqd('POST', '/pub?topic=jobs', 'job 2');
  const c = await requeuer('jobs', 'work', 2);
  try {
    await until(async () => channelOf(await stats(), 'jobs_dlq', 'held').depth === 2, 'two dead letters');
  } finally {
    c.destroy();
  }
  await until(async () => {
    const w = channelOf(await stats(), 'jobs', 'work');
    return w.depth === 0 && w.in_flight_count === 0;
  }, 'jobs/work emptied');
  const origins = (await nsqdJSON('/channel/peek?topic=jobs_dlq&channel=held')).messages.map((m) => m.dead_letter.id).sort();
  assert.equal(origins.length, 2);

  const p = await page();
  await p.goto(ADMIN + '/topics/jobs_dlq/held');
  await p.waitForSelector('#peek-btn');
  await p.click('#peek-btn');
  await p.waitForSelector('#peek-table');
  const cells = p.locator('#peek-table [data-field=dead_letter]');
  assert.equal(await cells.count(), 2);
  const shown = [];
  for (let i = 0; i < 2; i++) {
    const cellI = cells.nth(i);
    assert.equal(await cellI.getAttribute('data-origin'), 'jobs:work');
    assert.equal((await cellI.locator('[data-field=origin]').textContent()).trim(), 'jobs:work');
    assert.equal((await cellI.locator('[data-field=reason]').textContent()).trim(), 'max attempts');
    assert.equal(num(await cellI.locator('[data-field=origin_attempts]').textContent()), 1);
    shown.push((await cellI.locator('[data-field=origin_id]').textContent()).trim());
  }
  assert.deepEqual(shown.sort(), origins);
  await shot(p, 'channel-peek-dead-letters-1280');

  // Redrive: confirm, then the outcome and the page's new numbers.
  assert.equal(num(await p.locator('#channel-nodes tr.total [data-field=depth]').textContent()), 2);
  await p.click('#redrive-btn');
  await p.waitForSelector('dialog#confirm[open]');
  assert.match(await p.textContent('#confirm-text'), /Are you sure you want to redrive held\?/);
  // Cancel moves nothing.
  await p.click('dialog#confirm button[value=cancel]');
  assert.equal(channelOf(await stats(), 'jobs_dlq', 'held').depth, 2);
  await p.click('#redrive-btn');
  await p.waitForSelector('dialog#confirm[open]');
  await p.click('#confirm-ok');
  await p.waitForSelector('#redrive-summary');
  assert.match(await p.textContent('#redrive-summary'), /moved 2, skipped 0, failed 0/);
  assert.equal(num(await p.locator('#channel-nodes tr.total [data-field=depth]').textContent()), 0);
  const s = await stats();
  assert.equal(channelOf(s, 'jobs_dlq', 'held').depth, 0);
  assert.equal(channelOf(s, 'jobs', 'work').depth, 2);
  await shot(p, 'channel-redrive-1280');

  // With a topic: published there (a message without a known origin too).
  await nsqd('POST', '/topic/create?topic=jobs_retry');
  await nsqd('POST', '/channel/create?topic=jobs_retry&channel=r');
  await nsqd('POST', '/pub?topic=jobs_dlq', 'by hand');
  await p.reload();
  await p.waitForSelector('#redrive-form');
  await p.fill('#redrive-to', 'jobs_retry');
  await p.click('#redrive-btn');
  await p.waitForSelector('dialog#confirm[open]');
  assert.match(await p.textContent('#confirm-text'), /redrive held into topic jobs_retry/);
  await p.click('#confirm-ok');
  await p.waitForSelector('#redrive-summary');
  assert.match(await p.textContent('#redrive-summary'), /to topic jobs_retry: moved 1, skipped 0, failed 0/);
  assert.equal(channelOf(await stats(), 'jobs_retry', 'r').depth, 1);
  assert.equal(channelOf(await stats(), 'jobs_dlq', 'held').depth, 0);
  await p.close();
});

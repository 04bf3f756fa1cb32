// tests/e2e/webui.mjs - the web page at / in a real browser: Debian's chromium, headless,
// driven by playwright-core (pinned in package.json), against the real daemon with an API
// key. It asks for the key, streams an answer, stops a long one (the request is cancelled
// and its pages come back, as /metrics shows), shows an answer's validation figures and
// receipt, shows 8 running sequences and their KV pages in the engine view, draws the
// graph and the memory ledger, fits a phone's width, and works over HTTPS. Every wait is on the page's DOM
// or on /metrics; the engine is held with the daemon's test gates, never by timing.
// Screenshots of each view go to $GS_BUILD_DIR/tests/webui/.
//
// Usage: node webui.mjs GRAPHSERVE_BINARY SHARED_DIR
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { startDaemon, stopDaemon } from './daemon.mjs';

const [bin, shared] = process.argv.slice(2);
assert.ok(bin && shared, 'usage: node webui.mjs GRAPHSERVE_BINARY SHARED_DIR');
const browserPath = process.env.CHROMIUM || '/usr/bin/chromium';
assert.ok(existsSync(browserPath), `no browser at ${browserPath}: install Debian's chromium (./dev deps test)`);
const out = `${process.env.GS_BUILD_DIR || '.'}/tests/webui`;
mkdirSync(out, { recursive: true });
const KEY = 'webui-test-key';
const auth = { Authorization: `Bearer ${KEY}` };

// The engine's gates (server/cmd/serve_val.h): while HOLD exists the engine waits before
// sampling; while HOLD_AT exists it waits at sequence positions >= GATE_AT.
const GATE_AT = 48; // past the chat prompt's last position, before the completions' end
const HOLD = `${out}/gate-all`;
const HOLD_AT = `${out}/gate-at`;
const gate = (path, on) => (on ? writeFileSync(path, '') : rmSync(path, { force: true }));

let d, browser, page;
const problems = []; // console errors and uncaught exceptions: CSP violations land here

async function metric(name) {
  const res = await fetch(`${d.url}/metrics`, { headers: auth });
  const text = await res.text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.slice(name.length + 1)) : NaN;
}

// Polls /metrics until pred holds; a hang is what the meson timeout catches.
async function awaitMetric(name, pred) {
  for (;;) {
    const v = await metric(name);
    if (pred(v)) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
}

const shot = (name) => page.screenshot({ path: `${out}/${name}.png` });

before(async () => {
  gate(HOLD, false);
  gate(HOLD_AT, false);
  process.env.GS_TEST_STEP_GATE = HOLD;
  process.env.GS_TEST_STEP_GATE_AT = `${GATE_AT}:${HOLD_AT}`;
  d = await startDaemon(bin, ['-m', `${shared}/models/stories260K.gguf`, '--api-key', KEY]);
  browser = await chromium.launch({ executablePath: browserPath, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  page.on('console', (m) => m.type() === 'error' && !/401/.test(m.text()) && problems.push(m.text()));
  page.on('pageerror', (e) => problems.push(String(e)));
});

after(async () => {
  gate(HOLD, false);
  gate(HOLD_AT, false);
  if (browser) await browser.close();
  const { code } = await stopDaemon(d);
  assert.equal(code, 0, `daemon exit status; log:\n${d.log()}`);
  assert.ok(!/Sanitizer/.test(d.log()), d.log());
});

test('the page loads, asks for the key and shows the model', async () => {
  await page.goto(`${d.url}/`);
  const dialog = page.locator('#key-dialog');
  await dialog.waitFor({ state: 'visible' });
  await page.getByLabel('Key', { exact: true }).fill(KEY);
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('#model-name', { hasText: 'stories260K' }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('graphserve.apiKey')), KEY);
});

test('an answer streams in, and Stop cancels it: its pages come back', async () => {
  await page.locator('#params summary').click();
  await page.getByLabel('Max tokens').fill('200');
  gate(HOLD_AT, true); // the answer runs to position GATE_AT, then waits
  const cancelled = await metric('graphserve_engine_cancellations_total');
  await page.getByLabel('Message', { exact: true }).fill('Once upon a time');
  await page.getByRole('button', { name: 'Send' }).click();
  // Text while the answer is unfinished: tokens streamed in.
  const streaming = page.locator('.msg.assistant.streaming .body');
  await page.waitForFunction(() => {
    const b = document.querySelector('.msg.assistant.streaming .body');
    return b && b.textContent.trim().length > 0;
  });
  assert.ok((await streaming.textContent()).trim().length > 0);
  assert.equal(await metric('graphserve_requests_in_flight'), 1);
  await shot('chat-streaming');
  await page.getByRole('button', { name: 'Stop' }).click();
  await page.locator('.msg.assistant .finish', { hasText: 'stopped' }).waitFor();
  // The daemon noticed the client go; only then may the engine move on.
  await awaitMetric('graphserve_requests_in_flight', (v) => v === 0);
  gate(HOLD_AT, false);
  await awaitMetric('graphserve_engine_cancellations_total', (v) => v >= cancelled + 1);
  await awaitMetric('graphserve_kv_pages{state="used"}', (v) => v === 0);
});

test('regenerate answers in full, with its validation figures and receipt', async () => {
  await page.getByLabel('Max tokens').fill('40');
  await page.getByRole('button', { name: 'Regenerate' }).click();
  // Passed or failed is the model's business (docs/SERVER.md: short answers may fail on
  // a near-tie); the page must show the finished report either way.
  const evidence = page.locator('.msg.assistant .evidence summary', { hasText: /Validation: (passed|failed)/ });
  await evidence.waitFor();
  await evidence.click();
  const figures = await page.locator('.msg.assistant .figures').textContent();
  for (const k of ['top-1 rate', 'top-10 overlap', 'Pearson', 'KL', 'first divergence', 'model sha256', 'graph hash', 'seed'])
    assert.ok(figures.includes(k), `${k} in ${figures}`);
  assert.equal(await page.locator('.msg.assistant').count(), 1, 'the stopped answer was replaced');
  // Kept in the browser: a reload shows the same conversation.
  await page.reload();
  await page.locator('.msg.assistant .evidence').waitFor();
  assert.equal(await page.locator('.msg.user').count(), 1);
  await page.locator('.msg.assistant .evidence summary').click();
  await shot('chat');
});

test('model text is shown as text, never as HTML', async () => {
  const injected = await page.evaluate(async () => {
    const { renderMarkdown } = await import('/assets/markdown.js');
    const box = document.createElement('div');
    box.append(renderMarkdown('<img src=x onerror="window.pwned=1"> **bold** [x](javascript:alert(1))\n```js\n<b>code</b>\n```'));
    return { html: box.innerHTML, imgs: box.querySelectorAll('img').length, links: box.querySelectorAll('a').length, strong: box.querySelectorAll('strong').length, code: box.querySelector('pre code').textContent };
  });
  assert.equal(injected.imgs, 0);
  assert.equal(injected.links, 0, 'javascript: links are not links');
  assert.equal(injected.strong, 1);
  assert.equal(injected.code, '<b>code</b>');
});

test('the engine view shows 8 running sequences and their pages', async () => {
  await page.getByRole('tab', { name: 'Engine' }).click();
  await page.locator('#engine-status', { hasText: 'Connected' }).waitFor();
  gate(HOLD, true);
  gate(HOLD_AT, true);
  const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 60, ignore_eos: true, temperature: 0, stream: true });
  const runs = Array.from({ length: 8 }, () =>
    fetch(`${d.url}/v1/completions`, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body }).then(async (r) => ({ status: r.status, text: await r.text() })),
  );
  // All 8 in the engine's hands, then let them run to position GATE_AT together.
  await awaitMetric('graphserve_requests_in_flight', (v) => v === 8);
  gate(HOLD, false);
  await page.waitForFunction(() => document.querySelectorAll('#engine-seqs li').length === 8);
  const pages = await page.$$eval('#engine-seqs li', (lis) => lis.map((li) => Number(li.dataset.pages)));
  assert.ok(pages.every((p) => p >= 1), `pages per sequence: ${pages}`);
  assert.equal(await page.locator('#e-running').textContent(), '8');
  await shot('engine');
  gate(HOLD_AT, false);
  for (const r of await Promise.all(runs)) {
    assert.equal(r.status, 200);
    assert.ok(r.text.includes('[DONE]'));
  }
  await page.waitForFunction(() => document.querySelectorAll('#engine-seqs li').length === 0);
});

test('the graph view draws the graph before and after the passes, and zooms', async () => {
  await page.getByRole('tab', { name: 'Graph' }).click();
  await page.waitForFunction(() => Number(document.getElementById('graph').dataset.nodes) > 0);
  const served = await page.locator('#graph g.node').count();
  assert.ok(served > 10, `${served} nodes`);
  assert.match(await page.locator('#g-summary').textContent(), /The passes changed: .+→/);
  await page.getByLabel('As built').check();
  await page.waitForFunction(() => document.getElementById('graph').dataset.which === 'built');
  const built = await page.locator('#graph g.node').count();
  assert.ok(built > served, `built ${built} > served ${served}`);
  const before = await page.locator('#graph g.viewport').getAttribute('transform');
  await page.locator('#graph').focus();
  await page.keyboard.press('+');
  assert.notEqual(await page.locator('#graph g.viewport').getAttribute('transform'), before);
  await page.getByLabel('As served (after the passes)').check();
  await page.waitForFunction(() => document.getElementById('graph').dataset.which === 'served');
  await shot('graph');
});

test('the memory view shows the ledger', async () => {
  // One table row per ledger row, as many as /debug/memory has.
  const ledger = await (await fetch(`${d.url}/debug/memory`, { headers: auth })).json();
  assert.ok(ledger.rows.length >= 7, `${ledger.rows.length} ledger rows`);
  await page.getByRole('tab', { name: 'Memory' }).click();
  await page.waitForFunction((n) => document.querySelectorAll('#m-rows tr').length === n,
    ledger.rows.length);
  const kv = await page.locator('#m-rows tr[data-kind="kv_pool"]').getAttribute('data-bytes');
  const res = await fetch(`${d.url}/metrics`, { headers: auth });
  assert.ok((await res.text()).includes(`graphserve_memory_bytes{kind="kv_pool"} ${kv}\n`));
  await shot('memory');
});

test('the tabs work from the keyboard and the page fits a phone', async () => {
  await page.getByRole('tab', { name: 'Memory' }).focus();
  await page.keyboard.press('Home');
  assert.equal(await page.getByRole('tab', { name: 'Chat' }).getAttribute('aria-selected'), 'true');
  await page.setViewportSize({ width: 390, height: 844 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow}px wider than the phone`);
  await shot('chat-phone');
  assert.deepEqual(problems, [], 'no console errors or exceptions (CSP included)');
});

test('the page works over HTTPS with a key', async () => {
  // A self-signed certificate for 127.0.0.1; the browser context is told to accept it.
  const k = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  execFileSync('openssl', ['req', '-x509', ...k, '-keyout', `${out}/tls.key`, '-out', `${out}/tls.pem`, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  const t = await startDaemon(bin, ['-m', `${shared}/models/stories260K.gguf`, '--api-key', KEY, '--tls-cert', `${out}/tls.pem`, '--tls-key', `${out}/tls.key`]);
  try {
    assert.match(t.url, /^https:/);
    const ctx = await browser.newContext({ ignoreHTTPSErrors: true });
    const p = await ctx.newPage();
    p.on('pageerror', (e) => problems.push(String(e)));
    await p.goto(`${t.url}/`);
    await p.locator('#key-dialog').waitFor({ state: 'visible' });
    await p.getByLabel('Key', { exact: true }).fill(KEY);
    await p.getByRole('button', { name: 'Save' }).click();
    await p.locator('#model-name', { hasText: 'stories260K' }).waitFor();
    await p.locator('#params summary').click();
    await p.getByLabel('Max tokens').fill('12');
    await p.getByLabel('Message', { exact: true }).fill('Once upon a time');
    await p.getByRole('button', { name: 'Send' }).click();
    await p.locator('.msg.assistant .evidence summary', { hasText: /Validation: (passed|failed)/ }).waitFor();
    assert.ok((await p.locator('.msg.assistant .body').textContent()).trim().length > 0);
    await ctx.close();
  } finally {
    const { code } = await stopDaemon(t);
    assert.equal(code, 0, `TLS daemon exit status; log:\n${t.log()}`);
  }
  assert.deepEqual(problems, []);
});

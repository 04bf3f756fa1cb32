// The engine, live: /debug/events while this view is open (the daemon builds the step
// trace only while someone listens, so closing the view stops it). Each step record
// gives the batch, the queue, tokens/s and the KV page map, drawn on a canvas with each
// used page in its owning sequence's colour.

import { el, sse } from './api.js';

const $ = (id) => document.getElementById(id);
const LOG_MAX = 30;

let controller = null;
let totals = { hits: 0, preempt: 0, gaps: 0 };
let pending = null; // the newest record not yet drawn
let hello = null;

// A stable colour per sequence id.
function seqColour(id) {
  const hue = (id * 137.508) % 360;
  return `hsl(${hue.toFixed(1)} 65% 48%)`;
}

function log(text) {
  const ol = $('e-log');
  ol.prepend(el('li', { text }));
  while (ol.children.length > LOG_MAX) ol.lastElementChild.remove();
}

// "u3c2f11" → ['u','u','u','c','c','f',...]
function decodeMap(map) {
  const out = [];
  for (const m of map.matchAll(/([ucf])(\d+)/g)) for (let i = 0; i < Number(m[2]); i++) out.push(m[1]);
  return out;
}

function drawMap(kv) {
  const canvas = $('kv-map');
  const states = decodeMap(kv.map);
  const owner = new Map();
  for (const s of kv.seqs) for (const [first, n] of s.pages) for (let p = first; p < first + n; p++) owner.set(p, s.seq);
  const width = canvas.clientWidth || 640;
  const n = states.length;
  const cell = Math.max(3, Math.min(16, Math.floor(Math.sqrt((width * 200) / Math.max(1, n)))));
  const cols = Math.max(1, Math.floor(width / cell));
  const rows = Math.ceil(n / cols);
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(cols * cell * ratio);
  canvas.height = Math.round(rows * cell * ratio);
  canvas.style.height = `${rows * cell}px`;
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  const styles = getComputedStyle(document.body);
  const free = styles.getPropertyValue('--page-free').trim() || '#ddd';
  const cached = styles.getPropertyValue('--page-cached').trim() || '#e0a030';
  for (let i = 0; i < n; i++) {
    const x = (i % cols) * cell;
    const y = Math.floor(i / cols) * cell;
    ctx.fillStyle = states[i] === 'f' ? free : states[i] === 'c' ? cached : owner.has(i) ? seqColour(owner.get(i)) : '#555';
    ctx.fillRect(x, y, cell - 1, cell - 1);
  }
  canvas.setAttribute('aria-label', `KV page map: ${kv.used} used, ${kv.cached} cached, ${kv.free} free of ${kv.pages_total} pages`);
}

function draw() {
  const r = pending;
  pending = null;
  if (!r) return;
  $('e-tps').textContent = r.tokens_per_s.toFixed(1);
  $('e-running').textContent = String(r.running);
  $('e-waiting').textContent = String(r.waiting);
  $('e-step').textContent = String(r.step);
  $('e-batch-tokens').textContent = String(r.batch_tokens);
  $('e-hits').textContent = String(totals.hits);
  $('e-preempt').textContent = String(totals.preempt);
  $('e-gaps').textContent = String(totals.gaps);
  const kv = r.kv;
  $('e-kv-summary').textContent = `${kv.used} used, ${kv.cached} cached, ${kv.free} free of ${kv.pages_total} (${kv.page_tokens} tokens each)`;
  drawMap(kv);
  $('e-batch').replaceChildren(
    ...r.batch.map((b) =>
      el('tr', {}, el('td', {}, el('span', { class: 'sw' }), ` ${b.seq}`), el('td', { text: String(b.prompt_tokens) }), el('td', { text: String(b.decode_tokens) })),
    ),
  );
  for (const [i, b] of r.batch.entries()) $('e-batch').children[i].querySelector('.sw').style.background = seqColour(b.seq);
  $('engine-seqs').replaceChildren(
    ...kv.seqs.map((s) => {
      const pages = s.pages.reduce((a, [, n]) => a + n, 0);
      const sw = el('span', { class: 'sw' });
      sw.style.background = seqColour(s.seq);
      const li = el('li', {}, sw, ` seq ${s.seq}: ${pages} page${pages === 1 ? '' : 's'}, ${s.tokens} tokens`);
      li.dataset.seq = String(s.seq);
      li.dataset.pages = String(pages);
      return li;
    }),
  );
}

function onRecord(r) {
  if (r.type === 'hello') {
    hello = r;
    $('engine-status').textContent = `Connected: ${r.pages_total} KV pages of ${r.page_tokens} tokens. Waiting for engine steps…`;
    return;
  }
  if (r.type === 'gap') {
    totals.gaps += r.dropped;
    log(`${r.dropped} step record(s) dropped: this page did not keep up`);
    return;
  }
  if (r.type === 'end') {
    $('engine-status').textContent = 'The server is shutting down.';
    return;
  }
  if (r.type !== 'step') return;
  for (const h of r.prefix_hits) {
    totals.hits++;
    log(`step ${r.step}: seq ${h.seq} reused ${h.pages} cached page(s) (${h.tokens} tokens)`);
  }
  if (r.n_preempted) {
    totals.preempt += r.n_preempted;
    log(`step ${r.step}: preempted ${r.preempted.join(', ')}${r.n_preempted > r.preempted.length ? ' …' : ''}`);
  }
  $('engine-status').textContent = `Live: step ${r.step}.`;
  const first = !pending;
  pending = r;
  if (first) requestAnimationFrame(draw);
}

export function engineShow() {
  if (controller) return;
  controller = new AbortController();
  const c = controller;
  $('engine-status').textContent = 'Connecting…';
  (async () => {
    try {
      for await (const data of sse('/debug/events', { signal: c.signal })) onRecord(JSON.parse(data));
      if (controller === c) $('engine-status').textContent = 'The stream ended.';
    } catch (e) {
      if (!c.signal.aborted) $('engine-status').textContent = `Not connected: ${e.message}`;
    }
    if (controller === c) controller = null;
  })();
}

export function engineHide() {
  if (controller) controller.abort();
  controller = null;
}

export function engineHello() {
  return hello;
}

// The memory ledger from /debug/memory (the same rows /metrics reports as
// graphserve_memory_bytes), refreshed while the view is open.

import { apiJson, el, formatBytes } from './api.js';

const $ = (id) => document.getElementById(id);
const REFRESH_MS = 2000;
let timer = null;

async function refresh() {
  try {
    const m = await apiJson('/debug/memory');
    const max = Math.max(1, ...m.rows.map((r) => r.bytes));
    $('m-rows').replaceChildren(
      ...m.rows.map((r) => {
        const bar = el('span', { class: 'bar' });
        bar.style.width = `${((100 * r.bytes) / max).toFixed(1)}%`;
        const tr = el('tr', {}, el('th', { scope: 'row', text: r.kind }), el('td', { class: 'num', text: formatBytes(r.bytes) }), el('td', { class: 'bar-col' }, bar), el('td', { text: r.help }));
        tr.dataset.kind = r.kind;
        tr.dataset.bytes = String(r.bytes);
        return tr;
      }),
    );
    const kv = m.kv;
    $('m-summary').textContent = `${
        formatBytes(
            m.total_bytes)} in all (kv_used and prefix_cache are parts of kv_pool, stream_buffers of request_arenas). KV pages: ${
        kv.pages_used} used, ${kv.pages_cached} cached, ${kv.pages_free} free of ${
        kv.pages_total}.`;
  } catch (e) {
    $('m-summary').textContent = `No ledger: ${e.message}`;
  }
}

export function memoryShow() {
  refresh();
  if (!timer) timer = setInterval(refresh, REFRESH_MS);
}

export function memoryHide() {
  clearInterval(timer);
  timer = null;
}

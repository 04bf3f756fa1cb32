// The chat: conversations kept in localStorage, answers streamed from
// /v1/chat/completions, a stop button that aborts the request (the daemon sees the
// client go and frees its pages), regenerate and edit, the sampling parameters, and
// each answer's validation figures and receipt.

import { api, ApiError, el, sse } from './api.js';
import { renderMarkdown } from './markdown.js';

const STORE = 'graphserve.conversations';
const $ = (id) => document.getElementById(id);

let convs = [];
let current = null; // the conversation shown
let running = null; // {controller, conv, msg} while an answer streams
let modelId = '';

function load() {
  try {
    convs = JSON.parse(localStorage.getItem(STORE) || '[]');
  } catch {
    convs = [];
  }
  if (!Array.isArray(convs)) convs = [];
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(convs));
  } catch {
    showError('This browser would not keep the conversation (storage full?).');
  }
}

function newConv() {
  const c = { id: `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`, title: 'New chat', messages: [] };
  convs.unshift(c);
  current = c;
  save();
  renderList();
  renderMessages();
  $('prompt').focus();
}

function showError(text) {
  const p = $('chat-error');
  p.textContent = text || '';
  p.hidden = !text;
}

function renderList() {
  const ul = $('conv-list');
  ul.replaceChildren();
  for (const c of convs) {
    const open = el('button', { type: 'button', class: 'conv-open', text: c.title, 'aria-current': c === current ? 'true' : 'false' });
    open.addEventListener('click', () => {
      if (running) return;
      current = c;
      renderList();
      renderMessages();
    });
    const del = el('button', { type: 'button', class: 'quiet conv-delete', 'aria-label': `Delete “${c.title}”`, text: '×' });
    del.addEventListener('click', () => {
      if (running && running.conv === c) return;
      convs = convs.filter((x) => x !== c);
      if (current === c) current = convs[0] || null;
      if (!current) newConv();
      save();
      renderList();
      renderMessages();
    });
    ul.append(el('li', {}, open, del));
  }
}

function fmt(v, digits) {
  return typeof v === 'number' ? v.toFixed(digits) : v === null || v === undefined ? '—' : String(v);
}

// The evidence behind an answer: the validation report and the receipt.
function evidence(m) {
  if (!m.validation && !m.receipt) return null;
  const box = el('details', { class: 'evidence' });
  const v = m.validation;
  let label = 'Receipt';
  if (v) {
    const ok = v.status === 'done' ? (v.passed ? 'passed' : 'failed') : v.status;
    label = `Validation: ${ok}`;
    box.classList.add(v.status !== 'done' ? 'pending' : v.passed ? 'pass' : 'fail');
  }
  box.append(el('summary', { text: label }));
  const dl = el('dl', { class: 'figures' });
  const row = (k, val) => dl.append(el('div', {}, el('dt', { text: k }), el('dd', { text: val })));
  if (v && v.status === 'done') {
    row('top-1 rate', fmt(v.top1_rate, 4));
    row('top-10 overlap', fmt(v.mean_topk_overlap, 4));
    row('Pearson (min)', fmt(v.min_pearson, 7));
    row('KL mean (nats)', fmt(v.mean_kl, 8));
    row('first divergence', v.first_divergence === null ? 'none' : String(v.first_divergence));
    row('positions', String(v.n_positions));
    row('reference', v.reference_backend || 'ref');
    if (v.reason && v.reason !== 'ok') row('reason', v.reason);
  } else if (v) {
    row('status', v.status);
    if (v.reason) row('reason', v.reason);
  }
  const r = m.receipt;
  if (r) {
    row('model sha256', r.model_sha256 || '');
    row('graph hash', r.graph_hash || '');
    row('backend', `${r.backend || ''} ${r.kernel_variant || ''}`.trim());
    if (r.seed !== undefined) row('seed', String(r.seed));
  }
  box.append(dl);
  return box;
}

function messageNode(m, index) {
  const li = el('li', { class: `msg ${m.role}` });
  li.dataset.index = String(index);
  li.append(el('span', { class: 'role', text: m.role === 'user' ? 'You' : 'Model' }));
  const body = el('div', { class: 'body' });
  if (m.role === 'assistant') body.append(renderMarkdown(m.content));
  else body.append(el('p', { class: 'plain', text: m.content }));
  li.append(body);
  if (m.finish) li.append(el('span', { class: 'finish', text: m.finish === 'stopped' ? 'stopped' : `finish: ${m.finish}` }));
  if (m.error) li.append(el('p', { class: 'error', text: m.error }));
  const ev = evidence(m);
  if (ev) li.append(ev);
  if (m.role === 'user') {
    const edit = el('button', { type: 'button', class: 'quiet edit', text: 'Edit', 'aria-label': 'Edit this message and answer again' });
    edit.addEventListener('click', () => {
      if (running) return;
      $('prompt').value = m.content;
      current.messages = current.messages.slice(0, index);
      save();
      renderMessages();
      $('prompt').focus();
    });
    li.append(edit);
  }
  return li;
}

function renderMessages() {
  const ol = $('messages');
  ol.replaceChildren(...(current ? current.messages.map(messageNode) : []));
  ol.scrollTop = ol.scrollHeight;
  const last = current && current.messages[current.messages.length - 1];
  $('regenerate').disabled = !!running || !last || last.role !== 'assistant';
}

// The request's body from the parameters; throws with a message on a bad schema.
function requestBody(conv) {
  const messages = [];
  const system = $('p-system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  for (const m of conv.messages) if (m.role === 'user' || (m.role === 'assistant' && !m.error)) messages.push({ role: m.role, content: m.content });
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  if (modelId) body.model = modelId;
  const num = (id) => {
    const v = $(id).value.trim();
    return v === '' ? undefined : Number(v);
  };
  const t = num('p-temperature');
  if (t !== undefined) body.temperature = t;
  const p = num('p-top-p');
  if (p !== undefined) body.top_p = p;
  const n = num('p-max-tokens');
  if (n !== undefined) body.max_tokens = n;
  const seed = num('p-seed');
  if (seed !== undefined) body.seed = seed;
  const schema = $('p-schema').value.trim();
  if (schema) {
    let parsed;
    try {
      parsed = JSON.parse(schema);
    } catch (e) {
      throw new Error(`JSON schema: ${e.message}`);
    }
    body.response_format = { type: 'json_schema', json_schema: { name: 'answer', schema: parsed, strict: true } };
  }
  if ($('p-validate').checked) body.validation = true;
  return body;
}

function setRunning(r) {
  running = r;
  $('send').disabled = !!r;
  $('stop').disabled = !r;
  $('regenerate').disabled = true;
  document.body.classList.toggle('answering', !!r);
}

// Streams an answer to current's last user message.
async function answer() {
  const conv = current;
  let body;
  try {
    body = requestBody(conv);
  } catch (e) {
    showError(e.message);
    return;
  }
  showError('');
  const msg = { role: 'assistant', content: '' };
  conv.messages.push(msg);
  const controller = new AbortController();
  setRunning({ controller, conv, msg });
  renderMessages();
  const li = $('messages').lastElementChild;
  li.classList.add('streaming');
  const bodyNode = li.querySelector('.body');
  let pending = false;
  const paint = () => {
    pending = false;
    bodyNode.replaceChildren(renderMarkdown(msg.content));
    $('messages').scrollTop = $('messages').scrollHeight;
  };
  try {
    for await (const data of sse('/v1/chat/completions', { method: 'POST', body, signal: controller.signal })) {
      if (data === '[DONE]') break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message || 'the server ended the answer with an error');
      if (chunk.graphserve) msg.receipt = chunk.graphserve;
      if (chunk.validation) msg.validation = chunk.validation;
      if (chunk.usage) msg.usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (choice) {
        const delta = choice.delta || {};
        if (delta.content) {
          msg.content += delta.content;
          if (!pending) {
            pending = true;
            requestAnimationFrame(paint);
          }
        }
        if (choice.finish_reason) msg.finish = choice.finish_reason;
      }
    }
  } catch (e) {
    if (controller.signal.aborted) msg.finish = 'stopped';
    else msg.error = e instanceof ApiError && e.status === 401 ? 'The server wants an API key.' : e.message;
  }
  if (conv.title === 'New chat') {
    const first = conv.messages.find((m) => m.role === 'user');
    if (first) conv.title = first.content.slice(0, 40) || 'Chat';
  }
  setRunning(null);
  save();
  renderList();
  if (current === conv) renderMessages();
}

function send(ev) {
  ev.preventDefault();
  if (running) return;
  const text = $('prompt').value;
  if (!text.trim()) return;
  if (!current) newConv();
  current.messages.push({ role: 'user', content: text });
  $('prompt').value = '';
  save();
  renderMessages();
  answer();
}

export function initChat(model) {
  modelId = model;
  load();
  current = convs[0] || null;
  if (!current) newConv();
  renderList();
  renderMessages();
  $('composer').addEventListener('submit', send);
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) send(e);
  });
  $('stop').addEventListener('click', () => running && running.controller.abort());
  $('regenerate').addEventListener('click', () => {
    if (running || !current) return;
    const last = current.messages[current.messages.length - 1];
    if (!last || last.role !== 'assistant') return;
    current.messages.pop();
    answer();
  });
  $('new-conv').addEventListener('click', () => !running && newConv());
}

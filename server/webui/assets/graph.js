// The model's graph from /debug/graph, as built or as served (after the rewrite passes),
// laid out here in layers (each node one row below its deepest source) and drawn as
// SVG that pans (drag, arrow keys) and zooms (wheel, + and -, Fit: the whole graph; 0 on
// the keyboard).

import { apiJson } from './api.js';

const $ = (id) => document.getElementById(id);
const NS = 'http://www.w3.org/2000/svg';
const W = 150; // node box
const H = 34;
const GX = 24; // gaps
const GY = 46;

let data = null;
let view = { x: 0, y: 0, k: 1 };
let bounds = { w: 1, h: 1 };
let root = null;

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function opCounts(g) {
  const m = new Map();
  for (const n of g.nodes) m.set(n.op, (m.get(n.op) || 0) + 1);
  return m;
}

// What the passes did, as op counts that changed.
function summary() {
  const a = opCounts(data.built);
  const b = opCounts(data.served);
  const ops = new Set([...a.keys(), ...b.keys()]);
  const changes = [];
  for (const op of [...ops].sort()) {
    const x = a.get(op) || 0;
    const y = b.get(op) || 0;
    if (x !== y) changes.push(`${op} ${x}→${y}`);
  }
  return `${data.model} on ${data.backend}, graph ${data.graph_hash}: built ${data.built.n_nodes} nodes, served ${data.served.n_nodes}. The passes changed: ${changes.join(', ') || 'nothing'}.`;
}

function layout(g, weights) {
  const shown = g.nodes.filter((n) => weights || n.op !== 'weight');
  const keep = new Set(shown.map((n) => n.id));
  const rank = new Map();
  for (const n of shown) {
    let r = 0;
    for (const s of n.src) if (keep.has(s)) r = Math.max(r, rank.get(s) + 1);
    rank.set(n.id, r);
  }
  const layers = [];
  for (const n of shown) (layers[rank.get(n.id)] ||= []).push(n);
  const pos = new Map();
  let maxw = 0;
  layers.forEach((layer, r) => {
    maxw = Math.max(maxw, layer.length);
    layer.forEach((n, i) => pos.set(n.id, { x: i * (W + GX), y: r * (H + GY), n }));
  });
  // Centre each layer under the widest.
  layers.forEach((layer) => {
    const off = ((maxw - layer.length) * (W + GX)) / 2;
    for (const n of layer) pos.get(n.id).x += off;
  });
  return { shown, pos, w: Math.max(1, maxw * (W + GX)), h: Math.max(1, layers.length * (H + GY)) };
}

function apply() {
  if (root) root.setAttribute('transform', `translate(${view.x} ${view.y}) scale(${view.k})`);
}

function fit() {
  const box = $('graph').getBoundingClientRect();
  const k = Math.min(box.width / bounds.w, box.height / bounds.h, 1.5);
  view = { k: k > 0 ? k : 1, x: (box.width - bounds.w * k) / 2, y: 10 };
  apply();
}

// A scale one can read: the graph's width fitted up to natural size, from its top.
function readable() {
  const box = $('graph').getBoundingClientRect();
  const k = Math.min(1, box.width / bounds.w) || 1;
  view = { k, x: (box.width - bounds.w * k) / 2, y: 10 };
  apply();
}

function zoom(f, cx, cy) {
  const box = $('graph').getBoundingClientRect();
  if (cx === undefined) {
    cx = box.width / 2;
    cy = box.height / 2;
  }
  const k = Math.max(0.02, Math.min(8, view.k * f));
  view.x = cx - ((cx - view.x) * k) / view.k;
  view.y = cy - ((cy - view.y) * k) / view.k;
  view.k = k;
  apply();
}

function draw() {
  const which = document.querySelector('input[name="g-which"]:checked').value;
  const g = data[which];
  const { shown, pos, w, h } = layout(g, $('g-weights').checked);
  bounds = { w, h };
  const el = $('graph');
  el.replaceChildren();
  root = svg('g', { class: 'viewport' });
  const edges = svg('g', { class: 'edges' });
  const nodes = svg('g', { class: 'nodes' });
  for (const n of shown) {
    const p = pos.get(n.id);
    for (const s of n.src) {
      const q = pos.get(s);
      if (!q) continue;
      const x1 = q.x + W / 2;
      const y1 = q.y + H;
      const x2 = p.x + W / 2;
      const y2 = p.y;
      const my = (y1 + y2) / 2;
      edges.append(svg('path', { d: `M${x1} ${y1} C${x1} ${my} ${x2} ${my} ${x2} ${y2}` }));
    }
    const node = svg('g', { class: `node op-${n.op}`, transform: `translate(${p.x} ${p.y})` });
    node.append(svg('title', {}, `%${n.id} ${n.op} ${n.type} [${n.ne0} x ${n.rows}] ${n.name}${n.params ? ` {${n.params}}` : ''}`));
    node.append(svg('rect', { width: W, height: H, rx: 5 }));
    node.append(svg('text', { x: 6, y: 14, class: 'op' }, `${n.op}`));
    node.append(svg('text', { x: 6, y: 28, class: 'name' }, (n.name || `%${n.id}`).slice(0, 24)));
    nodes.append(node);
  }
  root.append(edges, nodes);
  el.append(root);
  el.dataset.nodes = String(shown.length);
  el.dataset.which = which;
  readable();
}

let wired = false;
function wire() {
  if (wired) return;
  wired = true;
  const el = $('graph');
  let drag = null;
  el.addEventListener('pointerdown', (e) => {
    drag = { x: e.clientX - view.x, y: e.clientY - view.y };
    el.setPointerCapture(e.pointerId);
  });
  el.addEventListener('pointermove', (e) => {
    if (!drag) return;
    view.x = e.clientX - drag.x;
    view.y = e.clientY - drag.y;
    apply();
  });
  el.addEventListener('pointerup', () => (drag = null));
  el.addEventListener(
    'wheel',
    (e) => {
      e.preventDefault();
      const box = el.getBoundingClientRect();
      zoom(e.deltaY < 0 ? 1.15 : 1 / 1.15, e.clientX - box.left, e.clientY - box.top);
    },
    { passive: false },
  );
  el.addEventListener('keydown', (e) => {
    const step = 40;
    const keys = {
      ArrowLeft: () => (view.x += step),
      ArrowRight: () => (view.x -= step),
      ArrowUp: () => (view.y += step),
      ArrowDown: () => (view.y -= step),
    };
    if (keys[e.key]) {
      keys[e.key]();
      apply();
    } else if (e.key === '+' || e.key === '=') zoom(1.25);
    else if (e.key === '-') zoom(1 / 1.25);
    else if (e.key === '0') fit();
    else return;
    e.preventDefault();
  });
  $('g-zoom-in').addEventListener('click', () => zoom(1.25));
  $('g-zoom-out').addEventListener('click', () => zoom(1 / 1.25));
  $('g-fit').addEventListener('click', fit);
  for (const r of document.querySelectorAll('input[name="g-which"]')) r.addEventListener('change', draw);
  $('g-weights').addEventListener('change', draw);
}

export async function graphShow() {
  wire();
  if (data) return;
  $('g-summary').textContent = 'Loading the graph…';
  try {
    data = await apiJson('/debug/graph');
    $('g-summary').textContent = summary();
    draw();
  } catch (e) {
    $('g-summary').textContent = `No graph: ${e.message}`;
  }
}

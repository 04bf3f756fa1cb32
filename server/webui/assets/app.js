// The page's entry: the tabs (arrow keys move between them), the API key dialog, and
// the model's name. Each view loads what it shows when it is opened.

import { apiJson, apiKey, onKeyWanted, setApiKey } from './api.js';
import { initChat } from './chat.js';
import { engineHide, engineShow } from './engine.js';
import { graphShow } from './graph.js';
import { memoryHide, memoryShow } from './memory.js';

const $ = (id) => document.getElementById(id);
const VIEWS = {
  chat: { show() {}, hide() {} },
  engine: { show: engineShow, hide: engineHide },
  graph: { show: graphShow, hide() {} },
  memory: { show: memoryShow, hide: memoryHide },
};
let shown = 'chat';

function select(name, focus) {
  for (const v of Object.keys(VIEWS)) {
    const on = v === name;
    const tab = $(`tab-${v}`);
    tab.setAttribute('aria-selected', on ? 'true' : 'false');
    tab.tabIndex = on ? 0 : -1;
    $(`view-${v}`).hidden = !on;
    if (on && focus) tab.focus();
  }
  if (shown !== name) VIEWS[shown].hide();
  shown = name;
  VIEWS[name].show();
  if (location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
}

function wireTabs() {
  const names = Object.keys(VIEWS);
  for (const v of names) {
    const tab = $(`tab-${v}`);
    tab.addEventListener('click', () => select(v));
    tab.addEventListener('keydown', (e) => {
      const i = names.indexOf(v);
      const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: names.length - 1 }[e.key];
      if (to === undefined) return;
      e.preventDefault();
      select(names[(to + names.length) % names.length], true);
    });
  }
}

function askKey(why) {
  const d = $('key-dialog');
  if (d.open) return;
  $('key-input').value = apiKey();
  const p = d.querySelector('p');
  p.textContent = `${why ? `${why}. ` : ''}The key is kept for this browser tab only (sessionStorage).`;
  d.showModal();
}

function wireKey() {
  const d = $('key-dialog');
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (e.submitter && e.submitter.value === 'save') {
      setApiKey($('key-input').value.trim());
      loadModel();
      if (shown !== 'chat') VIEWS[shown].hide(), VIEWS[shown].show();
    }
    d.close();
  });
  $('key-button').addEventListener('click', () => askKey(''));
  onKeyWanted((why) => askKey(why));
}

let modelLoaded = null;
async function loadModel() {
  try {
    const m = await apiJson('/v1/models');
    const id = m.data && m.data[0] ? m.data[0].id : '';
    $('model-name').textContent = id;
    return id;
  } catch (e) {
    $('model-name').textContent = '';
    return '';
  }
}

async function main() {
  wireTabs();
  wireKey();
  modelLoaded = loadModel();
  initChat(await modelLoaded);
  const start = location.hash.slice(1);
  select(VIEWS[start] ? start : 'chat');
}

main();

// Markdown to DOM nodes for model answers. Every piece of model text becomes a text node
// (textContent); nothing is ever parsed as HTML, and links keep only http(s) targets.
// Covers what chat answers use: fenced and inline code, headings, lists, quotes, bold,
// italics and links.

import { el } from './api.js';

const SAFE_URL = /^https?:\/\//i;

// Inline spans: `code`, **bold**, *italic* or _italic_, [text](url).
function inline(text, parent) {
  const re = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\n]+\*|_[^_\n]+_)|(\[[^\]\n]+\]\([^)\s]+\))/g;
  let at = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > at) parent.append(document.createTextNode(text.slice(at, m.index)));
    const t = m[0];
    if (m[1]) parent.append(el('code', { text: t.slice(1, -1) }));
    else if (m[2]) parent.append(inline(t.slice(2, -2), el('strong')));
    else if (m[3]) parent.append(inline(t.slice(1, -1), el('em')));
    else {
      const close = t.indexOf('](');
      const label = t.slice(1, close);
      const url = t.slice(close + 2, -1);
      if (SAFE_URL.test(url))
        parent.append(el('a', { href: url, rel: 'noopener noreferrer', target: '_blank', text: label }));
      else parent.append(document.createTextNode(t));
    }
    at = m.index + t.length;
  }
  if (at < text.length) parent.append(document.createTextNode(text.slice(at)));
  return parent;
}

export function renderMarkdown(src) {
  const root = document.createDocumentFragment();
  const lines = src.split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++; // the closing fence (or the end of an unfinished block while streaming)
      const code = el('code', { text: body.join('\n') });
      if (fence[2]) code.dataset.lang = fence[2];
      const copy = el('button', { type: 'button', class: 'copy quiet', text: 'Copy' });
      copy.addEventListener('click', () => navigator.clipboard && navigator.clipboard.writeText(code.textContent));
      root.append(el('div', { class: 'codeblock' }, fence[2] ? el('span', { class: 'lang', text: fence[2] }) : null, copy, el('pre', {}, code)));
      continue;
    }
    const h = line.match(/^(#{1,6})\s+(.*)$/);
    if (h) {
      root.append(inline(h[2], el(`h${Math.min(6, h[1].length + 2)}`)));
      i++;
      continue;
    }
    if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? 'ol' : 'ul');
      while (i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i]))
        list.append(inline(lines[i++].replace(/^\s*([-*+]|\d+[.)])\s+/, ''), el('li')));
      root.append(list);
      continue;
    }
    if (/^>\s?/.test(line)) {
      const quote = [];
      while (i < lines.length && /^>\s?/.test(lines[i])) quote.push(lines[i++].replace(/^>\s?/, ''));
      root.append(inline(quote.join('\n'), el('blockquote')));
      continue;
    }
    if (!line.trim()) {
      i++;
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !/^\s*(```|~~~|#{1,6}\s|>|[-*+]\s|\d+[.)]\s)/.test(lines[i]))
      para.push(lines[i++]);
    if (!para.length) para.push(lines[i++]);
    root.append(inline(para.join('\n'), el('p')));
  }
  return root;
}

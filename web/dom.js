// Small DOM helpers: element creation, keyed table rows updated in place (focus and
// scroll survive updates), ages that count up locally.

/// Creates an element: `h('a', {href: '#/x', class: 'y'}, 'text', child)`.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/// Replaces the children of `el`.
export function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

export function setText(el, text) {
  const s = String(text);
  if (el.textContent !== s) el.textContent = s;
}

/// A table whose rows follow a list of objects. `columns`: `{cls, head, text(item)}` for
/// text cells, `{cls, head, render(td, item, fresh)}` for others (called on every update,
/// `fresh` true the first time). `attr` names the row's key attribute (`data-pod`).
export function table(id, columns, attr) {
  const thead = h('thead', null, h('tr', null, columns.map((c) => h('th', { scope: 'col', class: c.cls }, c.head))));
  const tbody = h('tbody');
  const el = h('table', { id }, thead, tbody);
  const empty = h('p', { class: 'empty' });
  const wrap = h('div', { class: 'table-wrap' }, el, empty);
  return {
    el: wrap,
    update(items, keyOf, emptyText) {
      const existing = new Map([...tbody.children].map((tr) => [tr.getAttribute(attr), tr]));
      let before = tbody.firstChild;
      for (const item of items) {
        const k = keyOf(item);
        let tr = existing.get(k);
        const fresh = !tr;
        if (fresh) {
          tr = h('tr', { [attr]: k }, columns.map((c) => h('td', { class: c.cls, 'data-label': c.head })));
        }
        existing.delete(k);
        columns.forEach((c, i) => {
          const td = tr.children[i];
          if (c.text) setText(td, c.text(item));
          else c.render(td, item, fresh);
        });
        if (tr !== before) tbody.insertBefore(tr, before);
        else before = before.nextSibling;
      }
      for (const tr of existing.values()) tr.remove();
      setText(empty, items.length ? '' : emptyText || 'Nothing here yet.');
      empty.hidden = items.length > 0;
    },
    tbody,
  };
}

/// `5s`, `3m`, `2h`, `4d`, like kubectl.
export function age(ts) {
  if (!ts) return '-';
  return duration((Date.now() - Date.parse(ts)) / 1000);
}

/// A span of seconds as `age` writes it.
export function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `${m}m`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h`;
  return `${Math.floor(hours / 24)}d`;
}

/// An age cell that counts up by itself (a local clock, no requests).
export function ageCell(td, ts) {
  td.dataset.ts = ts || '';
  setText(td, age(ts));
}

setInterval(() => {
  for (const td of document.querySelectorAll('[data-ts]')) setText(td, age(td.dataset.ts));
}, 5000);

/// A `ready/desired` text with a bar under it.
export function replicasCell(td, ready, desired, current) {
  if (!td.firstChild) {
    td.append(h('span', { class: 'count' }), h('span', { class: 'bar', role: 'presentation' }, h('span', { class: 'fill' }), h('span', { class: 'current' })));
  }
  setText(td.firstChild, `${ready}/${desired}`);
  const bar = td.children[1];
  const pct = (n) => (desired > 0 ? Math.min(100, Math.round((100 * n) / desired)) : ready > 0 ? 100 : 0);
  // Widths go through the CSSOM (allowed by the CSP), not style attributes.
  bar.children[0].style.width = `${pct(ready)}%`;
  bar.children[1].style.width = `${pct(current === undefined ? ready : current)}%`;
  td.title = current === undefined ? `${ready} ready of ${desired}` : `${ready} ready, ${current} current, ${desired} desired`;
}

// A small JSON → YAML emitter for the edit view (the server parses the YAML), and a reader
// of the few top-level fields the console needs before sending a document.

const PLAIN = /^[A-Za-z0-9_./][A-Za-z0-9_./ :@-]*$/;
const AMBIGUOUS = /^(true|false|yes|no|on|off|y|n|null|~|[-+]?(\.inf|\.nan)|[-+]?[0-9][0-9_.:eExXoObB+-]*)$/i;

function scalar(v) {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'boolean' || typeof v === 'number') return String(v);
  const s = String(v);
  if (s === '' || !PLAIN.test(s) || AMBIGUOUS.test(s) || s.endsWith(' ') || s.endsWith(':') || s.includes(': ') || s.includes(' #')) {
    return JSON.stringify(s);
  }
  return s;
}

function keyText(k) {
  return PLAIN.test(k) && !AMBIGUOUS.test(k) && !k.includes(': ') && !k.endsWith(':') ? k : JSON.stringify(k);
}

const isEmpty = (v) => (Array.isArray(v) ? v.length === 0 : Object.keys(v).length === 0);
const isBlock = (v) => v !== null && typeof v === 'object' && !isEmpty(v);

function lines(v, indent, out) {
  const pad = ' '.repeat(indent);
  if (Array.isArray(v)) {
    for (const item of v) {
      if (isBlock(item)) {
        const sub = [];
        lines(item, indent + 2, sub);
        // The first line of the item goes after the dash.
        out.push(`${pad}- ${sub[0].slice(indent + 2)}`);
        for (const l of sub.slice(1)) out.push(l);
      } else {
        out.push(`${pad}- ${inline(item)}`);
      }
    }
    return;
  }
  for (const [k, item] of Object.entries(v)) {
    if (isBlock(item)) {
      out.push(`${pad}${keyText(k)}:`);
      lines(item, Array.isArray(item) ? indent : indent + 2, out);
    } else {
      out.push(`${pad}${keyText(k)}: ${inline(item)}`);
    }
  }
}

function inline(v) {
  if (Array.isArray(v)) return '[]';
  if (v !== null && typeof v === 'object') return '{}';
  return scalar(v);
}

/// The YAML text of a JSON value.
export function toYaml(v) {
  if (!isBlock(v)) return `${inline(v)}\n`;
  const out = [];
  lines(v, 0, out);
  return `${out.join('\n')}\n`;
}

function unquote(s) {
  s = s.replace(/\s+#.*$/, '').trim();
  if (s.startsWith('"')) {
    try {
      return JSON.parse(s);
    } catch (_) {
      return s.slice(1, -1);
    }
  }
  if (s.startsWith("'") && s.endsWith("'")) return s.slice(1, -1).replace(/''/g, "'");
  return s;
}

/// apiVersion, kind, metadata.name and metadata.namespace of a YAML (or JSON) document:
/// what the console needs to know where to send it. Anything else is the server's job.
export function header(text) {
  const t = text.trim();
  if (t.startsWith('{')) {
    const o = JSON.parse(t);
    const m = o.metadata || {};
    return { apiVersion: o.apiVersion, kind: o.kind, name: m.name, namespace: m.namespace };
  }
  const out = {};
  let inMetadata = false;
  let metaIndent = null;
  for (const raw of t.split('\n')) {
    if (raw.trim() === '---' && Object.keys(out).length) break;
    const line = raw.replace(/\r$/, '');
    if (!line.trim() || line.trim().startsWith('#')) continue;
    const indent = line.length - line.trimStart().length;
    const m = /^([A-Za-z]+):\s*(.*)$/.exec(line.trim());
    if (indent === 0) {
      inMetadata = m !== null && m[1] === 'metadata';
      metaIndent = null;
      if (m && (m[1] === 'apiVersion' || m[1] === 'kind') && m[2]) out[m[1]] = unquote(m[2]);
      continue;
    }
    if (inMetadata && m) {
      if (metaIndent === null) metaIndent = indent;
      if (indent === metaIndent && (m[1] === 'name' || m[1] === 'namespace') && m[2]) out[m[1]] = unquote(m[2]);
    }
  }
  return out;
}

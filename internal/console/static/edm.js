// EDM values as the page holds them: every value as the exact text the service sent or
// the user typed, with its type, so that nothing passes through a JavaScript number on
// its way (an Int64 beyond 2^53, a Double's last bit, DateTime's 100 ns ticks).

export const TYPES = ['String', 'Boolean', 'Int32', 'Int64', 'Double', 'DateTime', 'Guid', 'Binary'];

/** Num is a JSON number kept as its source text. */
class Num {
  constructor(src) { this.src = src; }
}

/**
 * parseJSON parses an entity response keeping numbers as their source text (JSON.parse
 * with the reviver's context.source); where the browser gives no source text, numbers
 * are re-printed, which is exact for every Int32 and for doubles JavaScript reads back.
 */
export function parseJSON(text) {
  return JSON.parse(text, function (key, value, ctx) {
    if (typeof value === 'number') return new Num(ctx && ctx.source !== undefined ? ctx.source : String(value));
    return value;
  });
}

const SYSTEM = new Set(['PartitionKey', 'RowKey', 'Timestamp']);

/**
 * fromWire turns one entity object (parseJSON, full metadata) into
 * {pk, rk, timestamp, etag, props: [{name, type, text, raw}]}: text is the value as the
 * editor shows it, raw its JSON source text exactly as the service sent it, which is
 * what goes back for a property the user did not change (toWire).
 */
export function fromWire(o) {
  const props = [];
  for (const [name, v] of Object.entries(o)) {
    if (name.includes('@') || name.startsWith('odata.') || SYSTEM.has(name)) continue;
    const ann = o[name + '@odata.type'];
    let type, text, raw;
    if (v instanceof Num) {
      type = ann ? ann.replace(/^Edm\./, '') : (/[.eE]/.test(v.src) ? 'Double' : 'Int32');
      text = raw = v.src;
    } else if (typeof v === 'boolean') {
      type = 'Boolean';
      text = raw = String(v);
    } else if (v === null) {
      continue; // a null property is an absent one
    } else {
      type = ann ? ann.replace(/^Edm\./, '') : 'String';
      text = v;
      raw = JSON.stringify(v);
    }
    if (type === 'Double' && /^-?\d+$/.test(text)) text += '.0';
    props.push({ name, type, text, raw });
  }
  return { pk: o.PartitionKey, rk: o.RowKey, timestamp: o.Timestamp, etag: o['odata.etag'], props };
}

// ---- strings the editor cannot show in a text box --------------------------------------

// A textarea turns CR and CRLF into LF, and control characters are invisible in it; lone
// surrogates are not text. Such a string is shown escaped instead.
const NOT_TEXT = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const ESCAPED = /[\\\u0000-\u001F\u007F-\u009F\u2028\u2029]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** textHolds reports whether a textarea holds s exactly and shows all of it: no CR, no
 * control character but tab and line feed, no lone surrogate. */
export function textHolds(s) {
  return !NOT_TEXT.test(s);
}

/** escapeString writes s on one line: \\, \n, \r, \t, and \uXXXX for other control
 * characters, line and paragraph separators and lone surrogates. unescapeString inverts it. */
export function escapeString(s) {
  return s.replace(ESCAPED, (c) => ({ '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' })[c] || '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
}

/** unescapeString reads escapeString's notation (and \" for a quote); it throws an
 * Error saying what is wrong with a backslash it cannot read. */
export function unescapeString(t) {
  return t.replace(/\\(u[0-9a-fA-F]{4}|[^]?)/g, (m, e) => {
    if (e.length === 5) return String.fromCharCode(parseInt(e.slice(1), 16));
    const c = { n: '\n', r: '\r', t: '\t', '\\': '\\', '"': '"' }[e];
    if (c === undefined) throw new Error(`A backslash starts an escape: \\n, \\r, \\t, \\\\ (a backslash) or \\uXXXX (not \\${e}).`);
    return c;
  });
}

/**
 * stringFormat is how the editor shows a string: 'text' (a textarea) when it holds it
 * exactly, else 'escaped' (one line, escapeString).
 */
export function stringFormat(s) {
  return textHolds(s) ? 'text' : 'escaped';
}

/**
 * logical is the value a control's text stands for, to tell whether the user changed it:
 * a String's characters (unescaped), a Binary's bytes as base64, any other type's text;
 * null when the text cannot be read.
 */
export function logical(type, text, format) {
  try {
    if (type === 'String') return format === 'escaped' ? unescapeString(text) : text;
    if (type === 'Binary') {
      const t = text.replace(/\s+/g, '');
      return format === 'hex' ? hexToBase64(t) : t;
    }
    return text;
  } catch {
    return null;
  }
}

const INT32 = /^-?\d{1,10}$/;
const INT64 = /^-?\d{1,19}$/;
const DOUBLE = /^-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const DATETIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(:(\d{2})(\.\d{1,7})?)?(Z|[+-]\d{2}:\d{2})$/;
const GUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const HEX = /^([0-9a-fA-F]{2})*$/;
const B64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** hexToBase64 converts hex digits (pairs) to base64. */
export function hexToBase64(hex) {
  let s = '';
  for (let i = 0; i < hex.length; i += 2) s += String.fromCharCode(parseInt(hex.slice(i, i + 2), 16));
  return btoa(s);
}

/** base64ToHex converts base64 to lower-case hex digits. */
export function base64ToHex(b64) {
  const bin = atob(b64);
  let s = '';
  for (let i = 0; i < bin.length; i++) s += bin.charCodeAt(i).toString(16).padStart(2, '0');
  return s;
}

/**
 * check returns an error message for a value its type cannot hold, '' when it is valid.
 * format is the Binary input's ('base64' or 'hex') or the String input's ('text' or
 * 'escaped').
 */
export function check(type, text, format = 'base64') {
  switch (type) {
    case 'String': {
      let v = text;
      if (format === 'escaped') {
        try { v = unescapeString(text); } catch (e) { return e.message; }
      }
      return v.length > 32768 ? 'A string holds at most 32,768 characters.' : '';
    }
    case 'Boolean': return text === 'true' || text === 'false' ? '' : 'true or false.';
    case 'Int32': {
      if (!INT32.test(text)) return 'A whole number, e.g. 42.';
      const n = Number(text);
      return n < -2147483648 || n > 2147483647 ? 'An Int32 is between -2147483648 and 2147483647.' : '';
    }
    case 'Int64': {
      if (!INT64.test(text)) return 'A whole number, e.g. 9007199254740993.';
      const n = BigInt(text);
      return n < -(2n ** 63n) || n >= 2n ** 63n ? 'An Int64 is between -9223372036854775808 and 9223372036854775807.' : '';
    }
    case 'Double':
      if (text === 'NaN' || text === 'Infinity' || text === '-Infinity') return '';
      if (!DOUBLE.test(text)) return 'A number, e.g. 3.25 or 1e-7, or NaN, Infinity, -Infinity.';
      return Number.isFinite(Number(text)) ? '' : 'Too large for a Double; use Infinity.';
    case 'DateTime': {
      const m = DATETIME.exec(text);
      if (!m) return 'ISO 8601 in UTC, e.g. 2024-05-01T12:00:00.1234567Z (up to 7 fraction digits: 100 ns).';
      return +m[2] < 1 || +m[2] > 12 || +m[3] < 1 || +m[3] > 31 || +m[4] > 23 || +m[5] > 59 || (m[7] && +m[7] > 59) ? 'Not a valid date and time.' : '';
    }
    case 'Guid': return GUID.test(text) ? '' : 'A GUID, e.g. 0f8fad5b-d9cb-469f-a165-70867728950e.';
    case 'Binary':
      if (format === 'hex') return HEX.test(text.replace(/\s+/g, '')) ? '' : 'Hex digits in pairs, e.g. 00ff10.';
      return B64.test(text.replace(/\s+/g, '')) && text.replace(/\s+/g, '').length % 4 === 0 ? '' : 'Base64, e.g. AAECAw==.';
  }
  return 'Unknown type.';
}

/** wireValue is a property's value as JSON source text and whether it needs an annotation. */
function wireValue(type, text, format) {
  switch (type) {
    case 'String': return [JSON.stringify(format === 'escaped' ? unescapeString(text) : text), false];
    case 'Boolean': return [text, false];
    case 'Int32': return [String(Number(text)), false];
    case 'Int64': return [JSON.stringify(BigInt(text).toString()), true];
    case 'Double':
      if (text === 'NaN' || text === 'Infinity' || text === '-Infinity') return [JSON.stringify(text), true];
      return [normalizeNumber(text), true];
    case 'Binary': {
      const t = text.replace(/\s+/g, '');
      return [JSON.stringify(format === 'hex' ? hexToBase64(t) : t), true];
    }
    default: return [JSON.stringify(text), true]; // DateTime, Guid
  }
}

/** normalizeNumber makes a valid JSON number of a Double's text (".5" → "0.5", "5." → "5.0"). */
function normalizeNumber(t) {
  let s = t.replace(/^(-?)\./, '$10.').replace(/\.(?=[eE]|$)/, '.0');
  if (!/[.eE]/.test(s)) s += '.0';
  return s;
}

/**
 * toWire builds the JSON body of an entity: keys, then props [{name, type, text, format,
 * raw}]. A property with raw (one the user did not change) is written as the service sent
 * it, byte for byte, with its type; the others from their text.
 */
export function toWire(pk, rk, props) {
  const parts = [`"PartitionKey":${JSON.stringify(pk)}`, `"RowKey":${JSON.stringify(rk)}`];
  for (const p of props) {
    const [v, annotate] = p.raw !== undefined ? [p.raw, !['String', 'Boolean', 'Int32'].includes(p.type)] : wireValue(p.type, p.text, p.format);
    if (annotate) parts.push(`${JSON.stringify(p.name + '@odata.type')}:"Edm.${p.type}"`);
    parts.push(`${JSON.stringify(p.name)}:${v}`);
  }
  return '{' + parts.join(',') + '}';
}

/** display is a value as the grid shows it: a string with line breaks or characters a
 * text cannot show is shown escaped (\\n, \\r, \\uXXXX), long values cut. */
export function display(p) {
  if (p.type === 'String') {
    const t = p.text.includes('\n') || !textHolds(p.text) ? escapeString(p.text) : p.text;
    return t.length > 120 ? t.slice(0, 120) + '…' : t;
  }
  if (p.type === 'Binary') return p.text.length > 60 ? p.text.slice(0, 60) + '…' : p.text;
  return p.text;
}

// The page's only way to the service: the Table REST API on this origin, each request
// signed with the account key (SharedKey, computed here) or carrying the user's SAS.
// Credentials live in this tab's sessionStorage only: never a cookie, a URL or a log.

import { hmacSha256 } from './sha256.js';

const STORE = 'cerulean.credentials';
export const API_VERSION = '2019-02-02';

/** b64decode turns base64 into bytes; it throws on anything else. */
export function b64decode(s) {
  const bin = atob(s.replace(/\s+/g, ''));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** b64encode turns bytes into base64. */
export function b64encode(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

/** hmac is base64(HMAC-SHA256(key, text)): crypto.subtle where the context is secure,
 * the pure-JS fallback elsewhere (plain http on a name other than localhost). */
export async function hmac(keyBytes, text) {
  const msg = new TextEncoder().encode(text);
  if (globalThis.crypto && crypto.subtle) {
    const k = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
    return b64encode(new Uint8Array(await crypto.subtle.sign('HMAC', k, msg)));
  }
  return b64encode(hmacSha256(keyBytes, msg));
}

/**
 * addressing is how the service reads the account from this page's own address, by its
 * rule: an IP literal, a single-label name (localhost) or host.docker.internal are
 * path-style (/<account>/…); any other name is virtual-hosted, and its first label is the
 * account (devstoreaccount1.cerulean.lan), so the page can sign in only to that one.
 */
export function addressing() {
  const host = location.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const ip = /^[\d.]+$/.test(host) || host.includes(':');
  if (ip || !host.includes('.') || host === 'host.docker.internal') return { pathStyle: true, account: '' };
  return { pathStyle: false, account: host.split('.')[0].replace(/-secondary$/, '') };
}

/** accountBase is the URL of the account's service root as the page reaches it. */
export function accountBase(account) {
  return addressing().pathStyle ? `${location.origin}/${account}` : location.origin;
}

/** SAS permission letters and what they allow. */
const TABLE_SAS = { r: 'query', a: 'add', u: 'update', d: 'delete' };

/**
 * parseSignIn turns what the user typed into credentials, or throws an Error saying
 * what is wrong. kind is 'key' (account + key), 'conn' (a connection string) or 'sas'
 * (a SAS URL, account or table SAS).
 */
export function parseSignIn(kind, fields) {
  if (kind === 'key') return keyCreds(fields.account.trim(), fields.key.trim());
  if (kind === 'conn') {
    const parts = {};
    for (const item of fields.conn.split(';')) {
      const i = item.indexOf('=');
      if (i > 0) parts[item.slice(0, i).trim().toLowerCase()] = item.slice(i + 1).trim();
    }
    if (parts.sharedaccesssignature) {
      const account = parts.accountname || accountFromEndpoint(parts.tableendpoint);
      return sasCreds(account, null, parts.sharedaccesssignature);
    }
    if (!parts.accountname || !parts.accountkey) throw new Error('The connection string needs AccountName and AccountKey (or SharedAccessSignature).');
    return keyCreds(parts.accountname, parts.accountkey);
  }
  let u;
  try {
    u = new URL(fields.sas.trim(), location.origin);
  } catch {
    throw new Error('The SAS URL is not a URL.');
  }
  const segs = u.pathname.split('/').filter(Boolean);
  const addr = addressing();
  if (!addr.pathStyle) return sasCreds(addr.account, segs[0] ? decodeURIComponent(segs[0]) : null, u.search.slice(1));
  if (segs.length === 0) throw new Error('The SAS URL must name the account in its path, e.g. ' + location.origin + '/devstoreaccount1?sv=…');
  return sasCreds(segs[0], segs[1] ? decodeURIComponent(segs[1]) : null, u.search.slice(1));
}

function accountFromEndpoint(ep) {
  if (!ep) return '';
  try {
    return new URL(ep).pathname.split('/').filter(Boolean)[0] || '';
  } catch {
    return '';
  }
}

function checkAccount(account) {
  if (!/^[a-z0-9]{3,24}$/.test(account)) throw new Error('An account name is 3 to 24 lower-case letters and digits.');
  const addr = addressing();
  if (!addr.pathStyle && addr.account !== account) {
    throw new Error(`This address (${location.host}) serves the account ${addr.account}: sign in to it, or open the console by IP address or localhost to reach ${account}.`);
  }
}

function keyCreds(account, key) {
  checkAccount(account);
  let bytes;
  try {
    bytes = b64decode(key);
  } catch {
    throw new Error('The account key is not base64.');
  }
  if (bytes.length === 0) throw new Error('The account key is empty.');
  return { kind: 'key', account, key };
}

function sasCreds(account, table, query) {
  checkAccount(account);
  const q = new URLSearchParams(query.replace(/^\?/, ''));
  if (!q.get('sig')) throw new Error('The SAS has no sig parameter: copy the whole SAS URL.');
  for (const k of [...q.keys()]) {
    if (!['sv', 'ss', 'srt', 'sp', 'st', 'se', 'sip', 'spr', 'sig', 'tn', 'spk', 'srk', 'epk', 'erk', 'si', 'ses'].includes(k)) q.delete(k);
  }
  const tn = q.get('tn') || table;
  const accountSAS = q.has('ss') || q.has('srt');
  if (accountSAS && !(q.get('ss') || '').includes('t')) throw new Error('This account SAS does not include the Table service (ss has no t).');
  return {
    kind: 'sas', account, sas: q.toString(), table: accountSAS ? null : tn,
    accountSAS, perms: q.get('sp') || '', srt: q.get('srt') || '', expiry: q.get('se') || '', policy: q.get('si') || '',
    range: { spk: q.get('spk'), srk: q.get('srk'), epk: q.get('epk'), erk: q.get('erk') },
  };
}

export function saveCreds(c) { sessionStorage.setItem(STORE, JSON.stringify(c)); }
export function loadCreds() {
  try { return JSON.parse(sessionStorage.getItem(STORE) || 'null'); } catch { return null; }
}
export function clearCreds() { sessionStorage.removeItem(STORE); }

/**
 * can tells what the credentials allow, as the service will decide it: the page hides
 * what is not allowed (the service refuses it anyway). what: listTables, createTable,
 * deleteTable, read, add, update, delete, settings, settingsWrite (a table's settings:
 * GET and PUT ?comp=properties), acl, cors, watch, sas.
 */
export function can(c, what, table) {
  if (!c) return false;
  if (c.kind === 'key') return true;
  const p = c.perms;
  if (c.accountSAS) {
    const srt = c.srt;
    switch (what) {
      case 'listTables': return srt.includes('c') && p.includes('l');
      case 'createTable': return srt.includes('c') && (p.includes('c') || p.includes('w') || p.includes('a'));
      case 'deleteTable': return srt.includes('c') && p.includes('d');
      case 'read': return srt.includes('o') && p.includes('r');
      case 'add': return srt.includes('o') && p.includes('a');
      case 'update': return srt.includes('o') && (p.includes('u') || p.includes('w'));
      case 'delete': return srt.includes('o') && p.includes('d');
      case 'cors': return srt.includes('s') && p.includes('r');
      case 'corsWrite': return srt.includes('s') && p.includes('w');
      case 'settings': return srt.includes('c') && (p.includes('r') || p.includes('l'));
      case 'settingsWrite': return srt.includes('c') && p.includes('w');
      default: return false; // acl, watch, sas need the key
    }
  }
  if (table && c.table && table.toLowerCase() !== c.table.toLowerCase()) return false;
  switch (what) {
    case 'read': return p.includes('r');
    case 'add': return p.includes('a');
    case 'update': return p.includes('u');
    case 'delete': return p.includes('d');
    default: return false;
  }
}

/** describeSAS says in words what a SAS allows, for the header. */
export function describeSAS(c) {
  if (c.kind !== 'sas') return '';
  const parts = [];
  if (c.accountSAS) {
    parts.push('account SAS: ' + (c.perms.split('').map((l) => ({ r: 'read', w: 'write', d: 'delete', l: 'list', a: 'add', c: 'create', u: 'update', p: 'process' })[l] || l).join(', ') || 'no permissions'));
  } else {
    parts.push(`table SAS for ${c.table}: ` + (c.perms.split('').map((l) => TABLE_SAS[l] || l).join(', ') || (c.policy ? 'as policy ' + c.policy : 'no permissions')));
    const r = c.range;
    if (r.spk || r.epk) parts.push(`keys from (${r.spk ?? '…'}, ${r.srk ?? '…'}) to (${r.epk ?? '…'}, ${r.erk ?? '…'})`);
  }
  if (c.expiry) parts.push('expires ' + c.expiry);
  return parts.join(' · ');
}

/** ApiError is a refused request: status, the service's error code and its message. */
export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/** enc escapes one path segment as the SDKs do, quotes included. */
export function enc(s) {
  return encodeURIComponent(s).replace(/[!'()*]/g, (ch) => '%' + ch.charCodeAt(0).toString(16).toUpperCase());
}

/** keyPath is the path of one entity: /Table(PartitionKey='…',RowKey='…'). */
export function keyPath(table, pk, rk) {
  return `/${enc(table)}(PartitionKey='${enc(pk.replace(/'/g, "''"))}',RowKey='${enc(rk.replace(/'/g, "''"))}')`;
}

/**
 * The retry policy of the JavaScript SDK (@azure/data-tables through core-rest-pipeline's
 * defaultRetryPolicy, @typespec/ts-http-runtime): up to 3 retries of an answer 408 or 5xx
 * other than 501 and 505, after 2^n seconds with jitter (half of it to all of it: 0.5–1 s,
 * 1–2 s, 2–4 s) and at most 64 s; a 429 or 503 carrying Retry-After (or retry-after-ms,
 * x-ms-retry-after-ms) waits what it says. In a browser the SDK does not retry a request
 * that got no answer (fetch fails with REQUEST_SEND_ERROR, not a system error it retries),
 * nor does the page: it offers Retry instead.
 */
export const RETRY = { maxRetries: 3, delayMs: 1000, maxDelayMs: 64000 };

/** retryable tells whether the SDKs retry an answer with this status. */
export function retryable(status) {
  return status === 408 || (status >= 500 && status !== 501 && status !== 505);
}

/** retryAfterMs is the wait a 429 or 503 asks for in its headers, or undefined. */
function retryAfterMs(status, headers) {
  if (status !== 429 && status !== 503) return undefined;
  for (const [name, unit] of [['retry-after-ms', 1], ['x-ms-retry-after-ms', 1], ['retry-after', 1000]]) {
    const v = headers.get(name);
    if (v !== null && v.trim() !== '' && Number.isFinite(Number(v))) return Number(v) * unit;
  }
  const d = Date.parse(headers.get('retry-after') || '');
  return Number.isFinite(d) ? Math.max(0, d - Date.now()) : undefined;
}

/** retryDelay is the wait before retry n (0 for the first), as the SDK computes it. */
export function retryDelay(n) {
  const clamped = Math.min(RETRY.maxDelayMs, RETRY.delayMs * 2 ** n);
  return clamped / 2 + Math.floor(Math.random() * (clamped / 2 + 1));
}

/**
 * request sends one Table REST API request for the signed-in account and returns
 * {status, headers, text}; a status of 400 or more throws an ApiError. path is below the
 * account ("/Tables", "/t(PartitionKey='a',RowKey='b')"); query an object of parameters.
 * An answer the SDKs retry (retryable) is retried as they do (RETRY), each try signed
 * anew; onRetry({status, code, retry, of, delayMs}) is told before each wait. The error
 * thrown at the end carries tries, the number of requests sent. signal (an AbortSignal)
 * cancels the request: it then throws an ApiError with code 'Aborted', never retried.
 */
export async function request(c, method, path, { query = {}, headers = {}, body = null, contentType = '', raw = false, onRetry = null, signal = null } = {}) {
  for (let retry = 0; ; retry++) {
    try {
      return await requestOnce(c, method, path, { query, headers, body, contentType, raw, signal });
    } catch (e) {
      e.tries = retry + 1;
      if (!(e instanceof ApiError) || retry >= RETRY.maxRetries) throw e;
      let delayMs = e.headers ? retryAfterMs(e.status, e.headers) : undefined;
      if (delayMs === undefined) {
        if (!retryable(e.status)) throw e;
        delayMs = retryDelay(retry);
      }
      if (onRetry) onRetry({ status: e.status, code: e.code, retry: retry + 1, of: RETRY.maxRetries, delayMs });
      await new Promise((r) => setTimeout(r, delayMs));
    }
  }
}

async function requestOnce(c, method, path, { query, headers, body, contentType, raw, signal }) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') params.set(k, v);
  let qs = params.toString().replace(/\+/g, '%20');
  if (c.kind === 'sas') qs = qs ? qs + '&' + c.sas : c.sas;
  // Path-style: /<account>/…; virtual-hosted (the account in the host name): the path alone.
  const fullPath = addressing().pathStyle ? '/' + c.account + path : path;
  const url = fullPath + (qs ? '?' + qs : '');
  const h = {
    'x-ms-version': API_VERSION,
    'x-ms-date': new Date().toUTCString(),
    'DataServiceVersion': '3.0;NetFx',
    'MaxDataServiceVersion': '3.0;NetFx',
    'Accept': 'application/json;odata=fullmetadata',
    ...headers,
  };
  if (body !== null) h['Content-Type'] = contentType || 'application/json';
  if (c.kind === 'key') {
    const comp = params.get('comp');
    const resource = '/' + c.account + fullPath + (comp !== null ? '?comp=' + comp : '');
    const sts = [method, '', body !== null ? h['Content-Type'] : '', h['x-ms-date'], resource].join('\n');
    h.Authorization = `SharedKey ${c.account}:${await hmac(b64decode(c.key), sts)}`;
  }
  let resp;
  try {
    resp = await fetch(url, { method, headers: h, body, cache: 'no-store', credentials: 'omit', redirect: 'error', signal });
  } catch (e) {
    if (signal?.aborted) throw new ApiError(-1, 'Aborted', 'The request was cancelled.');
    throw new ApiError(0, 'NetworkError', 'The service did not answer: ' + e.message);
  }
  const text = await resp.text();
  if (resp.status >= 400) {
    let code = resp.headers.get('x-ms-error-code') || '';
    let message = '';
    try {
      const j = JSON.parse(text);
      code = code || j['odata.error'].code;
      message = j['odata.error'].message.value;
    } catch {
      const m = /<Message>([\s\S]*?)<\/Message>/.exec(text);
      message = m ? m[1].replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&amp;/g, '&') : text;
      const cm = /<Code>([^<]*)<\/Code>/.exec(text);
      if (!code && cm) code = cm[1];
    }
    // The request id and time lines are for support tickets, not for the page.
    message = message.split('\n').filter((l) => !/^(RequestId|Time):/.test(l)).join('\n');
    const err = new ApiError(resp.status, code || String(resp.status), message, text);
    err.headers = resp.headers;
    throw err;
  }
  return raw ? resp : { status: resp.status, headers: resp.headers, text };
}

/** watch fetches /-/api/watch, signed with the key like an API request. */
export async function watch(c, table) {
  const date = new Date().toUTCString();
  const sts = ['GET', '', '', date, '/' + c.account + '/-/api/watch'].join('\n');
  const q = new URLSearchParams({ seconds: '120', top: '10' });
  if (table) q.set('table', table);
  const resp = await fetch('/-/api/watch?' + q, {
    headers: { 'x-ms-date': date, Authorization: `SharedKey ${c.account}:${await hmac(b64decode(c.key), sts)}` },
    cache: 'no-store', credentials: 'omit',
  });
  const text = await resp.text();
  if (!resp.ok) {
    let msg = text;
    try { msg = JSON.parse(text)['odata.error'].message.value; } catch { /* not JSON */ }
    throw new ApiError(resp.status, resp.headers.get('x-ms-error-code') || String(resp.status), msg);
  }
  return JSON.parse(text);
}

/**
 * tableSAS computes a table SAS for the signed-in (key) account: o has table, perms
 * ("raud" letters), start and expiry (ISO 8601 UTC, start optional), policy (si),
 * and the key range spk/srk/epk/erk (each optional). It returns the SAS URL.
 */
export async function tableSAS(c, o) {
  const f = (v) => v || '';
  const sts = [f(o.perms), f(o.start), f(o.expiry), `/table/${c.account}/${o.table.toLowerCase()}`, f(o.policy), '', '', API_VERSION,
    f(o.spk), f(o.srk), f(o.epk), f(o.erk)].join('\n');
  const sig = await hmac(b64decode(c.key), sts);
  const q = new URLSearchParams();
  q.set('sv', API_VERSION);
  q.set('tn', o.table);
  for (const [k, v] of [['sp', o.perms], ['st', o.start], ['se', o.expiry], ['si', o.policy], ['spk', o.spk], ['srk', o.srk], ['epk', o.epk], ['erk', o.erk]]) {
    if (v) q.set(k, v);
  }
  q.set('sig', sig);
  return `${accountBase(c.account)}/${enc(o.table)}?${q.toString().replace(/\+/g, '%20')}`;
}

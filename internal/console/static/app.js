// The console's views: sign-in, tables and entities, the entity editor, access policies,
// the SAS generator, CORS and Watch. Everything goes through api.js.

import * as api from './api.js';
import * as edm from './edm.js';

const $ = (sel, root = document) => root.querySelector(sel);
const main = $('#main');
const dialog = $('#dialog');
let creds = api.loadCreds();

/** h builds an element: h('button', {class: 'x', onclick: f}, 'text', child…). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'style') el.style.cssText = v; // CSSOM: the CSP forbids style attributes
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

/** Plain words for the codes people meet; the service's code is always shown beside. */
const PLAIN = {
  AuthenticationFailed: 'The service did not accept the key or SAS (wrong key, expired SAS, or the clock is off).',
  AuthorizationPermissionMismatch: 'These credentials do not allow this.',
  AuthorizationResourceTypeMismatch: 'This SAS does not cover this kind of resource.',
  AuthorizationFailure: 'These credentials do not allow this.',
  TableAlreadyExists: 'A table with this name already exists.',
  TableNotFound: 'The table does not exist (any more).',
  ResourceNotFound: 'Not found: it may have been deleted.',
  EntityAlreadyExists: 'An entity with this PartitionKey and RowKey already exists.',
  UpdateConditionNotSatisfied: 'Someone changed this entity since you opened it.',
  InvalidInput: 'The service could not read the request.',
  OutOfRangeInput: 'A value is out of range.',
  InvalidResourceName: 'The name is not valid.',
  PropertyNameInvalid: 'A property name is not valid: start with a letter or _, then letters, digits or _.',
  TableBeingDeleted: 'The table is being deleted; try again in a moment.',
  UniqueIndexViolation: 'Another entity already holds this value of a unique index of the table.',
  NetworkError: 'The service did not answer.',
};
const TABLE_RULES = 'Table names are 3 to 63 characters, letters and digits only, start with a letter, and are not "tables".';

/** The words for answers the SDKs retry (5xx, 408): the service failed, it refused nothing. */
const PLAIN_RETRIED = {
  ServerBusy: 'The service is busy.',
  InternalError: 'The service failed on this request.',
  OperationTimedOut: 'The service did not finish this request in time.',
};

/**
 * errorView shows an error in plain words with the service's code and message. retry,
 * when given, is offered as a Retry button for what trying again may cure: no answer,
 * 408, 429 and 5xx (after the retries api.request made, which it says).
 */
function errorView(e, extra = '', retry = null) {
  if (!(e instanceof api.ApiError)) return h('div', { class: 'error', role: 'alert' }, e.message || String(e));
  const transient = e.status === 0 || e.status === 408 || e.status === 429 || e.status >= 500;
  let plain = PLAIN[e.code] || 'The service refused the request.';
  if (e.status >= 500 || e.status === 408) {
    plain = PLAIN_RETRIED[e.code] || `The service could not answer this request (HTTP ${e.status}).`;
    if (e.tries > 1) plain += ` It answered ${e.status} to ${e.tries} tries (the request and ${e.tries - 1} retries with back-off, as the SDKs retry); try again in a while.`;
  }
  return h('div', { class: 'error', role: 'alert' }, plain, ' ', h('span', { class: 'code' }, e.code), extra ? '\n' + extra : '',
    transient && retry ? [' ', h('button', { type: 'button', class: 'retry', onclick: retry }, 'Retry')] : null,
    e.message ? h('div', { class: 'hint' }, e.message) : null);
}

/** retrying is an onRetry for api.request: it says in el what is being retried, and when. */
function retrying(el) {
  return ({ status, code, retry, of, delayMs }) => setStatus(el, h('span', { class: 'hint' },
    `The service answered ${status} ${code}: retry ${retry} of ${of} in ${(delayMs / 1000).toFixed(1)} s…`));
}

function setStatus(el, content) {
  el.replaceChildren(content || '');
}

// ---- routing ----------------------------------------------------------------------

function route() {
  stopWatch();
  stopTail();
  creds = api.loadCreds();
  const nav = $('#nav');
  if (!creds) {
    nav.hidden = true;
    $('#signout').hidden = true;
    $('#who').textContent = '';
    return signInView();
  }
  nav.hidden = false;
  $('#signout').hidden = false;
  $('#who').textContent = creds.account + (creds.kind === 'sas' ? ' — ' + api.describeSAS(creds) : ' — signed in with the account key');
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const view = parts[0] || 'tables';
  for (const a of nav.querySelectorAll('a')) {
    if (a.dataset.view === view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (view === 'watch') return watchView();
  if (view === 'cors') return corsView();
  return tablesView(parts[1] || (creds.table || ''), parts[2] || 'entities');
}

window.addEventListener('hashchange', route);
$('#signout').addEventListener('click', () => {
  api.clearCreds();
  tablePages = [''];
  tablePage = 0;
  location.hash = '';
  route();
});

// ---- sign-in ----------------------------------------------------------------------

function signInView() {
  let kind = 'key';
  const status = h('div', { class: 'status', id: 'signin-status' });
  const panes = {
    key: h('div', {},
      h('div', { class: 'field' }, h('label', { for: 'in-account' }, 'Account name'), h('input', { id: 'in-account', autocomplete: 'off', spellcheck: 'false', value: 'devstoreaccount1' })),
      h('div', { class: 'field' }, h('label', { for: 'in-key' }, 'Account key (base64)'), h('input', { id: 'in-key', type: 'password', autocomplete: 'off', class: 'mono' }))),
    conn: h('div', { class: 'field' }, h('label', { for: 'in-conn' }, 'Connection string (as printed when cerulean starts)'),
      h('textarea', { id: 'in-conn', class: 'mono', rows: 4, spellcheck: 'false' })),
    sas: h('div', { class: 'field' }, h('label', { for: 'in-sas' }, 'SAS URL (an account SAS, or a table SAS: …/account/table?sv=…&sig=…)'),
      h('textarea', { id: 'in-sas', class: 'mono', rows: 4, spellcheck: 'false' })),
  };
  const tabs = h('div', { class: 'tabs', role: 'tablist' });
  const show = (k) => {
    kind = k;
    for (const [name, pane] of Object.entries(panes)) pane.hidden = name !== k;
    for (const b of tabs.children) b.setAttribute('aria-selected', String(b.dataset.kind === k));
    setStatus(status);
  };
  for (const [k, label] of [['key', 'Account key'], ['conn', 'Connection string'], ['sas', 'SAS URL']]) {
    tabs.append(h('button', { type: 'button', role: 'tab', 'data-kind': k, id: 'tab-' + k, onclick: () => show(k) }, label));
  }
  const form = h('form', { class: 'card signin', id: 'signin' },
    h('h1', {}, 'Sign in'),
    h('p', { class: 'hint' }, 'Credentials stay in this browser tab (sessionStorage) and sign each request as the SDKs do; nothing is sent to the server but the signatures.'),
    tabs, panes.key, panes.conn, panes.sas, status,
    h('button', { class: 'primary', type: 'submit', id: 'signin-submit' }, 'Sign in'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let c;
    try {
      c = api.parseSignIn(kind, { account: $('#in-account').value, key: $('#in-key').value, conn: $('#in-conn').value, sas: $('#in-sas').value });
    } catch (e) {
      return setStatus(status, h('div', { class: 'error', role: 'alert' }, e.message));
    }
    setStatus(status, 'Checking…');
    // Prove the credentials with the cheapest request they allow.
    try {
      if (c.kind === 'key' || api.can(c, 'listTables')) await api.request(c, 'GET', '/Tables', { query: { $top: '1' } });
      else if (c.table) await api.request(c, 'GET', '/' + api.enc(c.table) + '()', { query: { $top: '1' } });
    } catch (e) {
      return setStatus(status, errorView(e));
    }
    api.saveCreds(c);
    tablePages = [''];
    tablePage = 0;
    location.hash = c.table ? '#/tables/' + encodeURIComponent(c.table) : '#/tables';
    route();
  });
  main.replaceChildren(form);
  show('key');
  $('#in-account').focus();
}

// ---- tables -----------------------------------------------------------------------

let tablePages = [''];
let tablePage = 0;

async function tablesView(selected, tab) {
  const list = h('ul', { class: 'tables', id: 'table-list', 'aria-label': 'Tables' });
  const listStatus = h('div', { class: 'status', id: 'tables-status' });
  const pager = h('div', { class: 'pager' });
  const right = h('section', { id: 'table-pane' });
  const left = h('section', { class: 'card' }, h('h1', {}, 'Tables'));
  if (api.can(creds, 'createTable')) {
    const name = h('input', { id: 'new-table', placeholder: 'new table name', autocomplete: 'off', spellcheck: 'false', style: 'width:100%' });
    const createStatus = h('div', { class: 'status', id: 'create-status' });
    const form = h('form', { id: 'create-table' }, h('div', { class: 'row' }, h('div', { class: 'field', style: 'flex:1' }, name), h('button', { type: 'submit', class: 'primary' }, 'Create')), createStatus);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const n = name.value.trim();
      setStatus(createStatus, 'Creating…');
      try {
        await api.request(creds, 'POST', '/Tables', { body: JSON.stringify({ TableName: n }), headers: { Prefer: 'return-no-content' } });
        setStatus(createStatus, h('span', { class: 'ok' }, `Created ${n}.`));
        name.value = '';
        location.hash = '#/tables/' + encodeURIComponent(n);
      } catch (e) {
        const rules = ['InvalidResourceName', 'OutOfRangeInput', 'InvalidInput'].includes(e.code) ? TABLE_RULES : '';
        setStatus(createStatus, errorView(e, rules));
      }
    });
    left.append(form);
  }
  left.append(list, pager, listStatus);
  main.replaceChildren(h('div', { class: 'split' }, left, right));

  // Only the newest load may show its answer, and the pager's buttons wait for it: a
  // second click on a slow page would otherwise start a load of a page not known yet, and
  // whichever answer came last would win.
  let listSeq = 0;
  const loadList = async () => {
    const seq = ++listSeq;
    for (const b of pager.querySelectorAll('button')) b.disabled = true;
    if (!api.can(creds, 'listTables')) {
      list.replaceChildren(...(creds.table ? [tableItem(creds.table, selected)] : []));
      setStatus(listStatus, h('span', { class: 'hint' }, creds.table ? 'This SAS is for one table.' : 'This SAS cannot list tables.'));
      return;
    }
    setStatus(listStatus, 'Loading…');
    try {
      const r = await api.request(creds, 'GET', '/Tables', { query: { NextTableName: tablePages[tablePage] } });
      if (seq !== listSeq) return;
      const names = JSON.parse(r.text).value.map((t) => t.TableName);
      list.replaceChildren(...names.map((n) => tableItem(n, selected)));
      const next = r.headers.get('x-ms-continuation-NextTableName');
      if (next) tablePages[tablePage + 1] = next;
      else tablePages.length = tablePage + 1;
      pager.replaceChildren(
        h('button', { type: 'button', id: 'tables-prev', disabled: tablePage === 0, onclick: () => { tablePage--; loadList(); } }, '‹ Previous'),
        h('span', { class: 'hint', id: 'tables-page' }, `page ${tablePage + 1}`),
        h('button', { type: 'button', id: 'tables-next', disabled: !next, onclick: () => { tablePage++; loadList(); } }, 'Next ›'));
      setStatus(listStatus, names.length ? '' : h('span', { class: 'hint' }, 'No tables yet.'));
    } catch (e) {
      if (seq !== listSeq) return;
      setStatus(listStatus, errorView(e));
    }
  };
  loadList();
  if (selected) tablePane(right, selected, tab);
  else right.replaceChildren(h('div', { class: 'card hint' }, 'Choose a table.'));

  function tableItem(n, sel) {
    const li = h('li', {}, h('a', { href: '#/tables/' + encodeURIComponent(n), 'aria-current': n === sel ? 'true' : null, 'data-table': n }, n));
    if (api.can(creds, 'deleteTable')) {
      li.append(h('button', { type: 'button', class: 'danger', 'aria-label': 'Delete table ' + n, 'data-delete-table': n, onclick: () => confirmDeleteTable(n, loadList) }, 'Delete'));
    }
    return li;
  }
}

function confirmDeleteTable(name, reload) {
  const status = h('div', { class: 'status' });
  const form = h('form', { method: 'dialog', id: 'confirm-delete-table' },
    h('div', { class: 'body' }, h('h1', {}, 'Delete table ' + name + '?'), h('p', {}, 'The table and every entity in it are deleted. This cannot be undone.'), status),
    h('div', { class: 'foot' }, h('span', { class: 'spacer' }), h('button', { type: 'button', onclick: () => dialog.close() }, 'Cancel'), h('button', { type: 'submit', class: 'danger', id: 'confirm-delete' }, 'Delete')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api.request(creds, 'DELETE', `/Tables('${api.enc(name)}')`);
      dialog.close();
      if (location.hash.startsWith('#/tables/' + encodeURIComponent(name))) location.hash = '#/tables';
      else reload();
    } catch (e) {
      setStatus(status, errorView(e));
    }
  });
  openDialog(form, '#confirm-delete');
}

function openDialog(content, focusSel) {
  dialog.replaceChildren(content);
  if (!dialog.open) dialog.showModal();
  const f = focusSel && $(focusSel, dialog);
  if (f) f.focus();
}

function tablePane(pane, table, tab) {
  const tabs = [['entities', 'Entities']];
  if (api.can(creds, 'read', table)) tabs.push(['changes', 'Changes']);
  if (api.can(creds, 'settings')) tabs.push(['settings', 'Settings']);
  if (creds.kind === 'key') tabs.push(['policies', 'Access policies'], ['sas', 'SAS URL']);
  const bar = h('div', { class: 'tabs', role: 'tablist' }, ...tabs.map(([k, label]) => h('button', {
    type: 'button', role: 'tab', id: 'tab-' + k, 'aria-selected': String(k === tab),
    onclick: () => { location.hash = `#/tables/${encodeURIComponent(table)}/${k}`; },
  }, label)));
  const body = h('div');
  pane.replaceChildren(h('h1', {}, table), bar, body);
  if (tab === 'policies' && creds.kind === 'key') return policiesView(body, table);
  if (tab === 'sas' && creds.kind === 'key') return sasView(body, table);
  if (tab === 'changes' && api.can(creds, 'read', table)) return changesView(body, table);
  if (tab === 'settings' && api.can(creds, 'settings')) return settingsView(body, table);
  return entitiesView(body, table);
}

// ---- settings: the table's settings and its secondary indexes --------------------------

/** SETTINGS_POLL_MS is how often the Settings view reads again while an index builds. */
const SETTINGS_POLL_MS = 2000;

/** readSettings reads the table's settings: the GET answer, parsed, as it came. */
async function readSettings(table) {
  const r = await api.request(creds, 'GET', '/' + api.enc(table), { query: { comp: 'properties' } });
  return JSON.parse(r.text);
}

/**
 * changeIndexes changes the table's index declarations with change (a function from the
 * declarations to the new ones, or a thrown Error to refuse) and writes the settings
 * back. Settings are replaced whole (PUT ?comp=properties), so it reads them afresh just
 * before writing and sends back everything it read — every other setting, every member it
 * does not know, and every other index, states and all (the GET answer is a valid PUT
 * body; the service ignores the states) — changing Indexes only: changing one setting
 * must never lose another, nor an index someone declared since the view was drawn.
 */
async function changeIndexes(table, change) {
  const st = await readSettings(table);
  const next = change(Array.isArray(st.Indexes) ? st.Indexes : []);
  const body = { ...st };
  if (next.length) body.Indexes = next;
  else delete body.Indexes;
  await api.request(creds, 'PUT', '/' + api.enc(table), { query: { comp: 'properties' }, body: JSON.stringify(body) });
}

/**
 * settingsView shows the table's settings (GET ?comp=properties) and its secondary
 * indexes (docs/indexes.md) — name, properties, unique, state, and the build's progress
 * or why it failed — and, with write access, adds and drops indexes on an elastic table.
 * While an index builds it reads the settings again every SETTINGS_POLL_MS, until none
 * does or the view is left.
 */
function settingsView(body, table) {
  const status = h('div', { class: 'status', id: 'set-status', 'aria-live': 'polite' });
  const summary = h('table', { class: 'props', id: 'set-summary' });
  const rows = h('tbody', { id: 'ix-rows' });
  const grid = h('table', { class: 'props', id: 'ix-grid' },
    h('thead', {}, h('tr', {}, ...['Name', 'Properties', 'Unique', 'State', 'Progress', ''].map((c) => h('th', {}, c)))), rows);
  const none = h('p', { class: 'hint', id: 'ix-none', hidden: true }, 'No indexes.');
  const writable = api.can(creds, 'settingsWrite');
  const name = h('input', { id: 'ix-name', class: 'mono', 'aria-label': 'Index name', placeholder: 'ByEmail', autocomplete: 'off', spellcheck: 'false', maxlength: 63 });
  const props = h('input', { id: 'ix-props', class: 'mono', 'aria-label': 'Properties', placeholder: 'Email  or  CustomerId, OrderDate', autocomplete: 'off', spellcheck: 'false' });
  const unique = h('input', { type: 'checkbox', id: 'ix-unique' });
  const addForm = h('form', { id: 'ix-add', hidden: true },
    h('h2', {}, 'Add an index'),
    h('div', { class: 'row' },
      h('div', { class: 'field' }, h('label', { for: 'ix-name' }, 'Name (letters and digits)'), name),
      h('div', { class: 'field', style: 'flex:1' }, h('label', { for: 'ix-props' }, 'Properties, in order (1 to 4, separated by commas)'), props),
      h('div', { class: 'field' }, h('label', { class: 'check' }, unique, 'unique (an alternate key)')),
      h('button', { type: 'submit', class: 'primary', id: 'ix-submit' }, 'Add index')),
    h('p', { class: 'hint' }, 'On a table with entities the index is built in the background: queries use it once it is ready. A unique index refuses (409 UniqueIndexViolation) a write giving a second entity the same values.'));
  const standard = h('p', { class: 'hint', id: 'ix-standard', hidden: true }, 'Secondary indexes are for elastic tables; this table is standard.');
  body.replaceChildren(h('div', { class: 'card', id: 'settings' },
    h('h2', {}, 'Settings'), summary,
    h('h2', {}, 'Secondary indexes'), standard, grid, none, addForm, status));

  let seq = 0;
  let poll = null;
  const show = (st) => {
    const ttl = st.DefaultTimeToLive === undefined ? 'off' : st.DefaultTimeToLive === -1 ? '-1 (only entities with their own TTL expire)' : st.DefaultTimeToLive + ' s';
    const line = (k, v) => h('tr', { 'data-setting': k }, h('th', {}, k), h('td', { class: 'mono' }, v));
    summary.replaceChildren(h('tbody', {},
      line('Elastic', String(!!st.Elastic)),
      st.Elastic ? line('Default time-to-live', ttl) : null,
      st.Elastic ? line('Time-to-live property', st.TimeToLiveProperty || '') : null,
      line('Change feed', st.ChangeFeedRetention ? `on, records kept ${st.ChangeFeedRetention} s` : 'off')));
    const ixs = Array.isArray(st.Indexes) ? st.Indexes : [];
    rows.replaceChildren(...ixs.map((ix) => {
      let progress = '';
      if (ix.State === 'building') progress = `${ix.Progress || 0} rows passed`;
      if (ix.State === 'failed') progress = ix.Failure || '';
      const drop = writable ? h('button', { type: 'button', class: 'danger', 'data-drop': ix.Name, 'aria-label': 'Drop index ' + ix.Name, onclick: () => confirmDropIndex(ix.Name) }, 'Drop') : null;
      return h('tr', { 'data-index': ix.Name, 'data-state': ix.State || '' },
        h('td', { class: 'mono' }, ix.Name), h('td', { class: 'mono' }, (ix.Properties || []).join(', ')),
        h('td', {}, ix.Unique ? 'unique' : ''), h('td', { class: 'state' }, ix.State || ''),
        h('td', { class: ix.State === 'failed' ? 'progress error' : 'progress' }, progress), h('td', {}, drop));
    }));
    grid.hidden = !ixs.length;
    none.hidden = !!ixs.length || !st.Elastic;
    standard.hidden = !!st.Elastic;
    addForm.hidden = !(writable && st.Elastic);
    clearTimeout(poll);
    if (ixs.some((ix) => ix.State === 'building')) poll = setTimeout(() => { if (body.isConnected) load(); }, SETTINGS_POLL_MS);
  };
  const load = async () => {
    const n = ++seq;
    try {
      const st = await readSettings(table);
      if (n !== seq || !body.isConnected) return;
      show(st);
      if (status.dataset.keep !== '1') setStatus(status);
    } catch (e) {
      if (n !== seq) return;
      setStatus(status, errorView(e, '', load));
    }
  };
  const write = async (what, change, done) => {
    status.dataset.keep = '1';
    setStatus(status, what + '…');
    for (const b of body.querySelectorAll('button')) b.disabled = true;
    try {
      await changeIndexes(table, change);
      setStatus(status, h('span', { class: 'ok' }, done));
      await load();
      return true;
    } catch (e) {
      setStatus(status, errorView(e));
      return false;
    } finally {
      for (const b of body.querySelectorAll('button')) b.disabled = false;
      status.dataset.keep = '';
    }
  };
  addForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const n = name.value.trim();
    const ps = props.value.split(',').map((p) => p.trim());
    if (!n || ps.some((p) => !p)) {
      return setStatus(status, h('div', { class: 'error', role: 'alert' }, 'Give the index a name and its properties, separated by commas.'));
    }
    const ok = await write('Adding ' + n, (ixs) => {
      const same = ixs.find((ix) => ix.Name.toLowerCase() === n.toLowerCase());
      if (same) throw new Error(`The table has an index named ${same.Name} already: drop it first to declare another under that name.`);
      return [...ixs, unique.checked ? { Name: n, Properties: ps, Unique: true } : { Name: n, Properties: ps }];
    }, `Added ${n}.`);
    if (ok) { name.value = ''; props.value = ''; unique.checked = false; }
  });
  function confirmDropIndex(n) {
    const form = h('form', { method: 'dialog', id: 'confirm-drop-index' },
      h('div', { class: 'body' }, h('h1', {}, 'Drop index ' + n + '?'), h('p', {}, 'Queries stop using it and its entries are removed; the entities are not touched. Adding it again builds it again.')),
      h('div', { class: 'foot' }, h('span', { class: 'spacer' }), h('button', { type: 'button', onclick: () => dialog.close() }, 'Cancel'), h('button', { type: 'submit', class: 'danger', id: 'confirm-drop' }, 'Drop')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      dialog.close();
      write('Dropping ' + n, (ixs) => {
        if (!ixs.some((ix) => ix.Name.toLowerCase() === n.toLowerCase())) throw new Error(`The table has no index named ${n} any more.`);
        return ixs.filter((ix) => ix.Name.toLowerCase() !== n.toLowerCase());
      }, `Dropped ${n}.`);
    });
    openDialog(form, '#confirm-drop');
  }
  setStatus(status, 'Loading…');
  load();
}

// ---- changes: a live tail of the table's change feed ---------------------------------------

/** TAIL_ROWS is how many records the Changes view keeps in the page (the newest). */
const TAIL_ROWS = 500;
/** TAIL_WAIT is the long poll's wait, in seconds (the service allows up to 60). */
const TAIL_WAIT = 25;
let tail = null;
function stopTail() { if (tail) tail.stop(); tail = null; }

/**
 * changesView follows the table's change feed (GET /{table}?comp=changes, long polling
 * with wait) and shows its records newest first, at most TAIL_ROWS of them: seq, op, the
 * commit time, the keys and, collapsed, the entity's new state. Pause stops reading (the
 * request in flight is cancelled); Resume reads on from where it stopped, so the records
 * written meanwhile appear and none is shown twice. A table without the feed says so.
 */
function changesView(body, table) {
  const status = h('div', { class: 'status', id: 'ch-status', 'aria-live': 'polite' });
  const info = h('span', { class: 'hint', id: 'ch-info' });
  const rows = h('tbody', { id: 'ch-rows' });
  const pauseBtn = h('button', { type: 'button', id: 'ch-pause' }, 'Pause');
  const fromSel = h('select', { id: 'ch-from', 'aria-label': 'Show changes from' },
    h('option', { value: 'now' }, 'from now on'), h('option', { value: 'beginning' }, 'from the oldest retained'));
  const grid = h('div', { class: 'gridwrap', id: 'ch-grid' }, h('table', { class: 'grid changes', id: 'change-grid' },
    h('thead', {}, h('tr', {}, ...['Seq', 'Op', 'Committed (UTC)', 'PartitionKey', 'RowKey', 'Entity'].map((c) => h('th', {}, c)))), rows));
  body.replaceChildren(h('div', { class: 'pager' }, pauseBtn, h('label', { for: 'ch-from', class: 'inline' }, 'Show changes'), fromSel, info), status, grid);

  const st = { cont: 'now', paused: false, ctrl: null, received: 0, ended: false };
  const say = (text, cls = 'hint') => setStatus(status, h('span', { class: cls }, text));
  const showInfo = () => { info.textContent = `${st.received} received · ${rows.children.length} shown (the newest ${TAIL_ROWS} are kept)`; };

  const stop = () => { if (st.ctrl) st.ctrl.abort(); st.ctrl = null; };
  const start = () => {
    stop();
    if (st.paused || st.ended) return;
    const ctrl = new AbortController();
    st.ctrl = ctrl;
    say('Starting…');
    follow(ctrl);
  };
  tail = { stop };

  async function follow(ctrl) {
    let pause = 1000;
    while (!ctrl.signal.aborted) {
      let page;
      try {
        // From "now", the first read answers at once with where the feed is; the reads
        // from a continuation wait for what follows it.
        const r = await api.request(creds, 'GET', '/' + api.enc(table), {
          query: { comp: 'changes', from: st.cont, wait: st.cont === 'now' ? '' : String(TAIL_WAIT) }, signal: ctrl.signal, onRetry: retrying(status),
        });
        page = edm.parseJSON(r.text);
      } catch (e) {
        if (ctrl.signal.aborted) return;
        if (e.status === 400 && e.code === 'InvalidQueryParameterValue') {
          grid.hidden = true;
          pauseBtn.disabled = fromSel.disabled = true;
          setStatus(status, h('div', { id: 'ch-off' }, h('p', {}, `The change feed of ${table} is off: the service records no changes for it.`),
            h('p', { class: 'hint' }, 'Turn it on with the table setting ChangeFeedRetention (how many seconds records are kept), through the settings endpoint (PUT /' + table + '?comp=properties, which replaces all the table\'s settings) or cerulean table set; see the change feed page of the documentation. Changes made before it is on are not recorded.')));
          return;
        }
        const transient = e.status === 0 || e.status === 408 || e.status === 429 || e.status >= 500;
        if (!transient) {
          st.ctrl = null;
          pauseBtn.disabled = true;
          if (e.code !== 'ChangeFeedContinuationExpired') return setStatus(status, errorView(e));
          // 410: records were removed by retention before this page read them.
          return setStatus(status, h('div', {}, errorView(e, 'Records the page had not read yet were removed by the feed\'s retention.'),
            h('button', { type: 'button', id: 'ch-restart', onclick: () => restart('now') }, 'Start again from now')));
        }
        setStatus(status, errorView(e, `Trying again in ${pause / 1000} s.`));
        await new Promise((r) => setTimeout(r, pause));
        pause = Math.min(2 * pause, 30000);
        continue;
      }
      if (ctrl.signal.aborted) return;
      pause = 1000;
      say(`Following: each change shows as it commits (a long poll of up to ${TAIL_WAIT} s a request).`);
      add(page.changes);
      st.cont = page.continuation;
      if (page.ended) {
        st.ended = true;
        st.ctrl = null;
        pauseBtn.disabled = true;
        return say('The table was deleted: its feed has ended.');
      }
    }
  }

  // add shows a page's records, newest first above those shown, and drops the oldest
  // beyond TAIL_ROWS.
  function add(changes) {
    st.received += changes.length;
    const frag = document.createDocumentFragment();
    for (const c of changes.slice(-TAIL_ROWS)) frag.prepend(changeRow(c));
    rows.prepend(frag);
    while (rows.children.length > TAIL_ROWS) rows.lastElementChild.remove();
    showInfo();
  }

  pauseBtn.addEventListener('click', () => {
    st.paused = !st.paused;
    pauseBtn.textContent = st.paused ? 'Resume' : 'Pause';
    pauseBtn.setAttribute('aria-pressed', String(st.paused));
    if (st.paused) {
      stop();
      say('Paused: nothing is read; Resume shows what changed meanwhile.');
    } else {
      start();
    }
  });
  // restart shows the changes from `from` ("now" or "beginning") afresh.
  const restart = (from) => {
    fromSel.value = st.cont = from;
    st.received = 0;
    st.ended = false;
    pauseBtn.disabled = false;
    rows.replaceChildren();
    showInfo();
    start();
  };
  fromSel.addEventListener('change', () => restart(fromSel.value));
  showInfo();
  start();
}

/** changeRow is one record of the Changes view: the entity collapsed in a details. */
function changeRow(c) {
  const num = (v) => (v && v.src !== undefined ? v.src : String(v));
  let entity = h('td', { class: 'empty' }, '—');
  if (c.entity) {
    const { 'cerulean.expiry': expiry, ...o } = c.entity;
    const e = edm.fromWire(o);
    const summary = e.props.map((p) => `${p.name}=${edm.display(p)}`).join(', ');
    entity = h('td', { class: 'entity' }, h('details', {},
      h('summary', {}, `${e.props.length} ${e.props.length === 1 ? 'property' : 'properties'}`, e.props.length ? ': ' + (summary.length > 80 ? summary.slice(0, 80) + '…' : summary) : ''),
      h('table', { class: 'props' }, h('tbody', {},
        ...e.props.map((p) => h('tr', { 'data-prop': p.name }, h('th', {}, p.name), h('td', { class: 'hint' }, p.type), h('td', { class: 'mono' }, edm.display(p)))),
        h('tr', {}, h('th', {}, 'ETag'), h('td'), h('td', { class: 'mono' }, e.etag || '')),
        expiry ? h('tr', {}, h('th', {}, 'Expires'), h('td'), h('td', { class: 'mono' }, expiry)) : null))));
  }
  const hasKeys = c.PartitionKey !== undefined;
  return h('tr', { 'data-seq': num(c.seq), 'data-op': c.op, 'data-pk': c.PartitionKey, 'data-rk': c.RowKey },
    h('td', { class: 'mono' }, num(c.seq)), h('td', { class: 'op op-' + c.op }, c.op), h('td', { class: 'mono' }, c.at),
    hasKeys ? h('td', { class: c.PartitionKey === '' ? 'empty' : null }, showKey(c.PartitionKey)) : h('td', { class: 'empty' }, '—'),
    hasKeys ? h('td', { class: c.RowKey === '' ? 'empty' : null }, showKey(c.RowKey)) : h('td', { class: 'empty' }, '—'),
    entity);
}

// ---- entities ---------------------------------------------------------------------

/** prefixRange is [ge, lt) of the keys starting with p. */
function prefixRange(p) {
  const last = p.charCodeAt(p.length - 1);
  return [p, p.slice(0, -1) + String.fromCharCode(last + 1)];
}

const lit = (s) => `'${s.replace(/'/g, "''")}'`;

/** quickFilter composes the quick filters (prefix or range per key) into $filter terms. */
function quickFilter(q) {
  const terms = [];
  for (const key of ['PartitionKey', 'RowKey']) {
    const k = key === 'PartitionKey' ? 'pk' : 'rk';
    if (q[k + 'Prefix']) {
      const [lo, hi] = prefixRange(q[k + 'Prefix']);
      terms.push(`${key} ge ${lit(lo)}`, `${key} lt ${lit(hi)}`);
    }
    if (q[k + 'From']) terms.push(`${key} ge ${lit(q[k + 'From'])}`);
    if (q[k + 'To']) terms.push(`${key} le ${lit(q[k + 'To'])}`);
  }
  return terms;
}

function entitiesView(body, table) {
  const st = { pages: [null], page: 0, seq: 0 };
  const inp = (id, label, attrs = {}) => h('div', { class: 'field', ...(attrs.wrap || {}) }, h('label', { for: id }, label), h('input', { id, autocomplete: 'off', spellcheck: 'false', class: 'mono', ...attrs.input }));
  const form = h('form', { id: 'query-form', class: 'card' },
    h('div', { class: 'row' },
      h('div', { class: 'field filterbox', style: 'flex:1; min-width: 320px' }, h('label', { for: 'q-filter' }, '$filter (e.g. Age gt 30 and Name eq \'x\')'),
        h('input', { id: 'q-filter', class: 'mono', autocomplete: 'off', spellcheck: 'false', style: 'width:100%' })),
      inp('q-select', '$select (comma-separated)', { input: { style: 'width: 200px' } }),
      inp('q-top', '$top (page size)', { input: { value: '1000', style: 'width: 90px', inputmode: 'numeric' } }),
      h('button', { type: 'submit', class: 'primary', id: 'q-run' }, 'Query')),
    h('div', { class: 'caret', id: 'q-caret', 'aria-hidden': 'true' }),
    h('div', { class: 'row' },
      inp('q-pk-prefix', 'PartitionKey prefix'), inp('q-pk-from', 'PartitionKey from'), inp('q-pk-to', 'PartitionKey to'),
      inp('q-rk-prefix', 'RowKey prefix'), inp('q-rk-from', 'RowKey from'), inp('q-rk-to', 'RowKey to')));
  const status = h('div', { class: 'status', id: 'q-status', 'aria-live': 'polite' });
  const pageInfo = h('span', { class: 'hint', id: 'q-page' });
  const partial = h('span', { class: 'hint partial', id: 'q-partial' });
  const prev = h('button', { type: 'button', id: 'q-prev', disabled: true, onclick: () => { st.page--; load(); } }, '‹ Previous');
  const next = h('button', { type: 'button', id: 'q-next', disabled: true, onclick: () => { st.page++; load(); } }, 'Next ›');
  const tools = h('div', { class: 'pager' }, prev, pageInfo, next, partial, h('span', { class: 'spacer', style: 'flex:1' }));
  if (api.can(creds, 'add', table)) tools.append(h('button', { type: 'button', id: 'new-entity', class: 'primary', onclick: () => editor(table, null, load) }, 'New entity'));
  const grid = h('div', { class: 'gridwrap', id: 'grid' });
  body.replaceChildren(form, tools, status, grid);
  const caret = $('#q-caret', form);

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    st.pages = [null];
    st.page = 0;
    load();
  });

  async function load() {
    const userFilter = $('#q-filter', form).value.trim();
    const q = {
      pkPrefix: $('#q-pk-prefix', form).value, pkFrom: $('#q-pk-from', form).value, pkTo: $('#q-pk-to', form).value,
      rkPrefix: $('#q-rk-prefix', form).value, rkFrom: $('#q-rk-from', form).value, rkTo: $('#q-rk-to', form).value,
    };
    const terms = quickFilter(q);
    // The user's filter goes first, unparenthesised-aware: positions in the service's
    // error message then point into what the user typed.
    let filter = userFilter;
    if (terms.length) filter = userFilter ? `(${userFilter}) and ${terms.join(' and ')}` : terms.join(' and ');
    const offset = userFilter && terms.length ? 1 : 0;
    const cont = st.pages[st.page];
    // $select: the keys and Timestamp are fetched whatever the user selects, so that a
    // row always names the entity it shows (the editor reads that entity whole).
    const selected = $('#q-select', form).value.replace(/\s+/g, '').split(',').filter(Boolean);
    const select = selected.length ? [...new Set([...selected, 'PartitionKey', 'RowKey', 'Timestamp'])].join(',') : '';
    const query = { $filter: filter, $select: select, $top: $('#q-top', form).value.trim() };
    if (cont) { query.NextPartitionKey = cont.pk; query.NextRowKey = cont.rk; }
    // Only the last query started shows its answer (an earlier one may answer later).
    const seq = ++st.seq;
    setStatus(status, 'Loading…');
    caret.textContent = '';
    try {
      const r = await api.request(creds, 'GET', '/' + api.enc(table) + '()', { query, onRetry: (i) => { if (seq === st.seq) retrying(status)(i); } });
      if (seq !== st.seq) return;
      const rows = edm.parseJSON(r.text).value.map(edm.fromWire);
      const npk = r.headers.get('x-ms-continuation-NextPartitionKey');
      if (npk) st.pages[st.page + 1] = { pk: npk, rk: r.headers.get('x-ms-continuation-NextRowKey') || '' };
      else st.pages.length = st.page + 1;
      prev.disabled = st.page === 0;
      next.disabled = !npk;
      pageInfo.textContent = `page ${st.page + 1} · ${rows.length} entities` + (npk ? ' · more' : '');
      partial.textContent = selected.length ? 'Partial view ($select): opening an entity reads all of it.' : '';
      partial.title = selected.length ? 'Only the selected properties are shown (and the keys and Timestamp, always fetched). The editor reads the whole entity by its keys, so nothing the view leaves out is lost.' : '';
      renderGrid(grid, rows, (e) => openEntity(table, e.pk, e.rk, load));
      setStatus(status, rows.length ? '' : h('span', { class: 'hint' }, 'No entities match.'));
    } catch (e) {
      if (seq !== st.seq) return;
      // No rows under the error: those shown were another query's answer.
      grid.replaceChildren();
      prev.disabled = st.page === 0;
      next.disabled = true;
      pageInfo.textContent = `page ${st.page + 1}`;
      partial.textContent = '';
      setStatus(status, errorView(e, '', load));
      const m = /position (\d+)/.exec(e.message || '');
      if (m && userFilter) {
        const pos = Math.max(0, +m[1] - offset);
        if (pos <= userFilter.length) caret.textContent = userFilter + '\n' + ' '.repeat(pos) + '^ ' + (e.message.split('\n').find((l) => l.startsWith('position')) || '');
      }
    }
  }
  load();
}

function renderGrid(grid, rows, open) {
  const cols = [];
  const types = new Map();
  for (const r of rows) {
    for (const p of r.props) {
      if (!types.has(p.name)) { types.set(p.name, new Set()); cols.push(p.name); }
      types.get(p.name).add(p.type);
    }
  }
  const head = h('tr', {}, h('th', {}, 'PartitionKey'), h('th', {}, 'RowKey'), h('th', {}, 'Timestamp', h('span', { class: 'type' }, 'DateTime')),
    ...cols.map((c) => h('th', {}, c, h('span', { class: 'type' }, [...types.get(c)].join(' | ')))));
  const body = h('tbody');
  for (const r of rows) {
    const byName = new Map(r.props.map((p) => [p.name, p]));
    const tr = h('tr', { tabindex: '0', 'data-pk': r.pk, 'data-rk': r.rk, onclick: () => open(r), onkeydown: (ev) => {
      // Handled here: the same Enter must not also act in the dialog it opens.
      if (ev.key === 'Enter') { ev.preventDefault(); open(r); }
    } },
      h('td', { class: r.pk === '' ? 'empty' : null }, showKey(r.pk)), h('td', { class: r.rk === '' ? 'empty' : null }, showKey(r.rk)), h('td', { class: 'mono' }, r.timestamp),
      ...cols.map((c) => {
        const p = byName.get(c);
        return p ? h('td', { title: p.type }, edm.display(p)) : h('td', { class: 'empty' }, '—');
      }));
    body.append(tr);
  }
  grid.replaceChildren(h('table', { class: 'grid', id: 'entity-grid' }, h('thead', {}, head), body));
}

/** showKey is a key as the page shows it: escaped if a text box would change or hide a
 * character of it, "(empty)" if empty. */
function showKey(k) {
  if (k === '') return '(empty)';
  return edm.textHolds(k) && !k.includes('\n') ? k : edm.escapeString(k);
}

/** keysLine names an entity by its keys. */
function keysLine(pk, rk, id) {
  return h('p', { class: 'keys', id }, 'PartitionKey ', h('span', { class: 'mono' }, showKey(pk)), ' · RowKey ', h('span', { class: 'mono' }, showKey(rk)));
}

// ---- editor -----------------------------------------------------------------------

/**
 * openEntity reads the entity by its keys — all of it, whatever the grid's $select
 * showed, with its current ETag — and opens the editor on that.
 */
async function openEntity(table, pk, rk, reload) {
  const status = h('div', { class: 'status', id: 'ed-status' }, 'Reading the entity…');
  const box = h('form', { id: 'ed-loading' },
    h('div', { class: 'body' }, h('h1', {}, 'Entity'), keysLine(pk, rk), status),
    h('div', { class: 'foot' }, h('span', { class: 'spacer' }), h('button', { type: 'button', id: 'ed-close', onclick: () => dialog.close() }, 'Close')));
  box.addEventListener('submit', (ev) => ev.preventDefault());
  openDialog(box, '#ed-close');
  try {
    const r = await api.request(creds, 'GET', api.keyPath(table, pk, rk), { onRetry: retrying(status) });
    if (dialog.open && dialog.firstChild === box) editor(table, edm.fromWire(edm.parseJSON(r.text)), reload);
  } catch (e) {
    if (dialog.firstChild !== box) return;
    setStatus(status, e.status === 404 ? errorView(e, 'It was deleted since the list was read.') : errorView(e, '', () => openEntity(table, pk, rk, reload)));
  }
}

/** lines is the height of a string's textarea: its lines, 1 to 8. */
const lines = (t) => Math.min(8, t.split('\n').length);

/**
 * editor opens the typed editor on entity e (null: a new one) of table; e is the whole
 * entity as read (openEntity). Every value is shown so that it can be written back
 * exactly: a String in a textarea (line breaks kept) or, when it holds characters a
 * textarea would change or hide (CR, control characters), escaped on one line. A property
 * the user did not change goes back byte for byte as it was read, with its type.
 */
function editor(table, e, reload) {
  const isNew = !e;
  const canAdd = api.can(creds, 'add', table);
  const canUpdate = api.can(creds, 'update', table);
  const canDelete = api.can(creds, 'delete', table);
  const readOnly = isNew ? !canAdd : !canUpdate;
  let etag = e ? e.etag : null;
  const rows = h('tbody');
  const status = h('div', { class: 'status', id: 'ed-status' });
  // An existing entity's keys are those read, never read back from the inputs (an input
  // drops line breaks; escaped keys are only shown so).
  const keys = e ? { pk: e.pk, rk: e.rk } : null;
  const keyInput = (id, k) => h('input', { id, value: e && k !== '' ? showKey(k) : '', placeholder: e ? '(empty)' : null, readonly: !isNew, class: 'mono', style: 'width:100%' });
  const pk = keyInput('ed-pk', e && e.pk);
  const rk = keyInput('ed-rk', e && e.rk);
  const entityKeys = () => keys || { pk: pk.value, rk: rk.value };
  // Enter saves from a string's textarea too; Shift+Enter is a line break there.
  const enterSaves = (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.altKey && !ev.isComposing) {
      ev.preventDefault();
      form.requestSubmit();
    }
  };

  const addRow = (p = { name: '', type: 'String', text: '' }) => {
    // What goes back if the value is left as it is: the JSON the service sent.
    const orig = p.raw !== undefined ? p : null;
    // A type the editor does not know stays in the list, so an untouched value keeps it.
    const types = edm.TYPES.includes(p.type) ? edm.TYPES : [...edm.TYPES, p.type];
    const type = h('select', { class: 'type', 'aria-label': 'Type', disabled: readOnly }, ...types.map((t) => h('option', { value: t, selected: t === p.type }, t)));
    const fmt = h('select', { class: 'format', 'aria-label': 'Format', disabled: readOnly });
    const note = h('div', { class: 'note', 'aria-live': 'polite' });
    const msg = h('div', { class: 'msg' });
    const cell = h('td', { class: 'valuecell' });
    let value, shownType;
    const describe = () => {
      let n = '';
      if (type.value === 'String') {
        const v = edm.logical('String', value.value, fmt.value);
        if (fmt.value === 'escaped') {
          n = (v !== null && !edm.textHolds(v) ? 'Shown escaped: a text box would change or hide some of its characters. ' : 'Escaped: ') +
            '\\n line feed, \\r carriage return, \\t tab, \\\\ backslash, \\uXXXX any character.';
        } else if (v && /^\s|\s$/.test(v)) n = 'Starts or ends with whitespace (kept).';
      }
      note.textContent = n;
    };
    /** show makes the value control for the row's type, holding text in format. */
    const show = (text, format) => {
      const t = type.value;
      shownType = t;
      const formats = t === 'Binary' ? ['base64', 'hex'] : t === 'String' ? ['text', 'escaped'] : [];
      fmt.replaceChildren(...formats.map((f) => h('option', { value: f, selected: f === format }, f)));
      fmt.hidden = !formats.length;
      if (t === 'Boolean') {
        value = h('select', { class: 'value', 'aria-label': 'Value', disabled: readOnly }, h('option', { value: 'true', selected: text === 'true' }, 'true'), h('option', { value: 'false', selected: text !== 'true' }, 'false'));
      } else if (t === 'String' && format === 'text') {
        value = h('textarea', { class: 'value mono', 'aria-label': 'Value', rows: lines(text), value: text, readonly: readOnly, spellcheck: 'false', autocomplete: 'off' });
        value.addEventListener('keydown', enterSaves);
        value.addEventListener('input', () => { value.rows = lines(value.value); });
      } else {
        value = h('input', { class: 'value mono', 'aria-label': 'Value', value: text, readonly: readOnly, spellcheck: 'false', autocomplete: 'off' });
      }
      value.addEventListener('input', describe);
      cell.replaceChildren(value, note, msg);
      describe();
    };
    if (p.type === 'String') {
      const f = edm.stringFormat(p.text);
      show(f === 'escaped' ? edm.escapeString(p.text) : p.text, f);
    } else {
      show(p.text, p.type === 'Binary' ? 'base64' : '');
    }
    const initial = orig ? edm.logical(type.value, value.value, fmt.value) : null;
    type.addEventListener('change', () => {
      // The same value under the new type; a String is shown as it can be held.
      const v = edm.logical(shownType, value.value, fmt.value) ?? value.value;
      if (type.value === 'String') {
        const f = edm.stringFormat(v);
        show(f === 'escaped' ? edm.escapeString(v) : v, f);
      } else {
        show(v, type.value === 'Binary' ? 'base64' : '');
      }
    });
    let shownFormat = fmt.value;
    fmt.addEventListener('change', () => {
      msg.textContent = '';
      if (type.value === 'Binary') {
        // Switching shows the same bytes in the other spelling.
        try {
          const t = value.value.replace(/\s+/g, '');
          value.value = fmt.value === 'hex' ? edm.base64ToHex(t) : edm.hexToBase64(t);
        } catch { /* leave what the user typed; check() explains */ }
      } else if (fmt.value === 'escaped') {
        show(edm.escapeString(value.value), 'escaped');
      } else {
        let v;
        try {
          v = edm.unescapeString(value.value);
        } catch (err) {
          fmt.value = shownFormat;
          msg.textContent = err.message;
          return;
        }
        if (!edm.textHolds(v)) {
          fmt.value = 'escaped';
          msg.textContent = 'It stays escaped: a text box would change or hide some of its characters (carriage returns, control characters).';
          return;
        }
        show(v, 'text');
      }
      shownFormat = fmt.value;
    });
    const tr = h('tr', { class: 'prop' },
      h('td', {}, h('input', { class: 'name mono', 'aria-label': 'Property name', value: p.name, readonly: readOnly, spellcheck: 'false', autocomplete: 'off' })),
      h('td', { class: 'typecell' }, type, ' ', fmt),
      cell,
      h('td', {}, readOnly ? '' : h('button', { type: 'button', 'aria-label': 'Remove property', onclick: () => tr.remove() }, '✕')));
    tr._get = () => {
      const t = type.value, text = value.value, format = fmt.value;
      const v = edm.logical(t, text, format);
      const prop = { name: $('.name', tr).value.trim(), type: t, text, format, value: v, msg };
      // Unchanged: it goes back exactly as it was read.
      if (orig && t === orig.type && initial !== null && v === initial) {
        prop.raw = orig.raw;
        prop.value = orig.text;
      }
      return prop;
    };
    rows.append(tr);
    return tr;
  };
  for (const p of e ? e.props : []) addRow(p);
  if (isNew) addRow();

  const collect = () => {
    let ok = true;
    const props = [];
    for (const tr of rows.children) {
      const p = tr._get();
      let m = p.name ? (p.raw !== undefined ? '' : edm.check(p.type, p.text, p.format)) : 'A property needs a name.';
      if (!p.name && !p.text) m = ''; // an empty row is ignored
      p.msg.textContent = m;
      if (m) ok = false;
      if (p.name) props.push(p);
    }
    return ok ? props : null;
  };

  const send = async (mode, ifMatch) => {
    const props = collect();
    if (!props) return setStatus(status, h('div', { class: 'error' }, 'Fix the values marked in red.'));
    const k = entityKeys();
    const body = edm.toWire(k.pk, k.rk, props);
    const path = isNew && mode === 'insert' ? '/' + api.enc(table) : api.keyPath(table, k.pk, k.rk);
    const method = { insert: 'POST', replace: 'PUT', merge: 'MERGE' }[mode];
    const headers = mode === 'insert' ? { Prefer: 'return-no-content' } : { 'If-Match': ifMatch };
    setStatus(status, 'Saving…');
    try {
      const r = await api.request(creds, method, path, { body, headers, onRetry: retrying(status) });
      etag = r.headers.get('ETag') || etag;
      dialog.close();
      reload();
    } catch (err) {
      if (err.status === 412) return conflict(mode, props);
      setStatus(status, errorView(err, '', () => send(mode, ifMatch)));
    }
  };

  /** conflict shows the user's version beside the current one, with the ways out. */
  const conflict = async (mode, mine) => {
    const k = entityKeys();
    let cur;
    try {
      const r = await api.request(creds, 'GET', api.keyPath(table, k.pk, k.rk), { onRetry: retrying(status) });
      cur = edm.fromWire(edm.parseJSON(r.text));
    } catch (err) {
      return setStatus(status, errorView(err, 'It was changed and could not be read back (deleted?).'));
    }
    // Values compared and shown as what they stand for (a string's characters).
    const mineV = mine.map((p) => ({ name: p.name, type: p.type, value: p.value ?? p.text }));
    const curV = cur.props.map((p) => ({ name: p.name, type: p.type, value: p.text }));
    const names = [...new Set([...mineV.map((p) => p.name), ...curV.map((p) => p.name)])];
    const shown = (p) => (p.type === 'String' ? showString(p.value) : p.value);
    const mineBy = new Map(mineV.map((p) => [p.name, p]));
    const curBy = new Map(curV.map((p) => [p.name, p]));
    // One row a property, its name never broken; the two values side by side, each with its type.
    const cell = (p, cls) => h('td', { class: 'mono ' + cls }, p ? [h('span', { class: 'type' }, p.type), ' ', shown(p)] : '—');
    const compare = h('div', { class: 'comparewrap' }, h('table', { class: 'compare', id: 'compare' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Property'), h('th', {}, 'Yours'), h('th', {}, 'Current', h('span', { class: 'type' }, cur.timestamp)))),
      h('tbody', {}, ...names.map((n) => {
        const a = mineBy.get(n), b = curBy.get(n);
        const diff = !a || !b || a.type !== b.type || a.value !== b.value;
        return h('tr', { class: diff ? 'diff' : '' }, h('th', {}, n), cell(a, 'mine'), cell(b, 'theirs'));
      }))));
    const back = () => dialog.replaceChildren(form);
    const box = h('form', { id: 'conflict' },
      h('div', { class: 'body' }, h('h1', {}, 'Changed since you opened it (412)'),
        keysLine(k.pk, k.rk, 'conflict-keys'),
        errorView(new api.ApiError(412, 'UpdateConditionNotSatisfied', 'Your ETag: ' + etag + '\nCurrent ETag: ' + cur.etag)),
        compare),
      h('div', { class: 'foot' }, h('span', { class: 'spacer' }),
        h('button', { type: 'button', id: 'conflict-cancel', onclick: () => {
          back();
          setStatus(status, h('span', { class: 'hint' }, 'Not saved: the entity changed since you opened it. Your changes are still here.'));
        } }, 'Cancel'),
        h('button', { type: 'button', id: 'conflict-take', onclick: () => editor(table, cur, reload) }, 'Discard mine, edit current'),
        mode === 'delete'
          ? h('button', { type: 'button', class: 'danger', id: 'conflict-overwrite', onclick: () => { etag = cur.etag; back(); remove(); } }, 'Delete anyway')
          : h('button', { type: 'button', class: 'primary', id: 'conflict-overwrite', onclick: () => { etag = cur.etag; back(); send(mode, cur.etag); } }, 'Overwrite with mine')));
    box.addEventListener('submit', (ev) => ev.preventDefault());
    dialog.replaceChildren(box);
    $('#conflict-overwrite', dialog).focus();
  };

  const foot = h('div', { class: 'foot' }, readOnly ? h('span', { class: 'hint', id: 'ed-readonly' }, 'Read-only: these credentials cannot change this entity.') : h('span', { class: 'hint' }, 'Enter saves · Shift+Enter: a line break'),
    h('span', { class: 'spacer' }), h('button', { type: 'button', id: 'ed-close', onclick: () => dialog.close() }, 'Close'));
  if (isNew && canAdd) foot.append(h('button', { type: 'submit', class: 'primary', id: 'ed-insert', 'data-mode': 'insert' }, 'Insert'));
  if (!isNew && canDelete) foot.append(h('button', { type: 'button', class: 'danger', id: 'ed-delete', onclick: () => del() }, 'Delete'));
  if (!isNew && canUpdate) {
    foot.append(h('button', { type: 'button', id: 'ed-merge', onclick: () => send('merge', etag) }, 'Merge'),
      h('button', { type: 'submit', class: 'primary', id: 'ed-replace', 'data-mode': 'replace' }, 'Replace'));
  }
  const form = h('form', { id: 'editor' },
    h('div', { class: 'body' },
      h('h1', {}, isNew ? 'New entity in ' + table : 'Entity'),
      h('div', { class: 'row' }, h('div', { class: 'field', style: 'flex:1' }, h('label', { for: 'ed-pk' }, 'PartitionKey'), pk),
        h('div', { class: 'field', style: 'flex:1' }, h('label', { for: 'ed-rk' }, 'RowKey'), rk)),
      e ? h('p', { class: 'hint' }, 'Timestamp ', h('span', { class: 'mono' }, e.timestamp), ' · ETag ', h('span', { class: 'mono', id: 'ed-etag' }, e.etag)) : '',
      h('table', { class: 'props' }, h('thead', {}, h('tr', {}, h('th', {}, 'Property'), h('th', {}, 'Type'), h('th', {}, 'Value'), h('th'))), rows),
      readOnly ? '' : h('button', { type: 'button', id: 'ed-add', onclick: () => $('.name', addRow()).focus() }, '+ Property'),
      status),
    foot);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (readOnly) return;
    send(isNew ? 'insert' : 'replace', etag);
  });
  const del = () => {
    const s = h('div', { class: 'status' });
    const k = entityKeys();
    const c = h('form', { id: 'confirm-delete-entity' },
      h('div', { class: 'body' }, h('h1', {}, 'Delete this entity?'), keysLine(k.pk, k.rk), s),
      h('div', { class: 'foot' }, h('span', { class: 'spacer' }), h('button', { type: 'button', onclick: () => dialog.replaceChildren(form) }, 'Cancel'),
        h('button', { type: 'submit', class: 'danger', id: 'confirm-delete' }, 'Delete')));
    c.addEventListener('submit', (ev) => {
      ev.preventDefault();
      remove(s);
    });
    openDialog(c, '#confirm-delete');
  };
  /** remove deletes the entity with the ETag it was read with (a 412 shows the conflict). */
  const remove = async (s = status) => {
    const k = entityKeys();
    try {
      await api.request(creds, 'DELETE', api.keyPath(table, k.pk, k.rk), { headers: { 'If-Match': etag }, onRetry: retrying(s) });
      dialog.close();
      reload();
    } catch (err) {
      if (err.status === 412) { dialog.replaceChildren(form); return conflict('delete', collect() || []); }
      setStatus(s, errorView(err, '', () => remove(s)));
    }
  };
  openDialog(form, isNew ? '#ed-pk' : (readOnly ? '#ed-close' : '.value'));
}

/** showString is a string as a page shows it in one cell: escaped if it has line
 * breaks or characters a text box would change or hide. */
function showString(s) {
  return edm.textHolds(s) && !s.includes('\n') ? s : edm.escapeString(s);
}

// ---- access policies ----------------------------------------------------------------

function xmlEscape(s) { return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;'); }

async function policiesView(body, table) {
  const status = h('div', { class: 'status', id: 'acl-status' });
  const rows = h('tbody', { id: 'acl-rows' });
  const addRow = (p = { id: '', start: '', expiry: '', perms: '' }) => {
    const perms = h('span', {}, ...'raud'.split('').map((l) => h('label', { class: 'perm' }, h('input', { type: 'checkbox', value: l, checked: p.perms.includes(l) }), { r: 'query', a: 'add', u: 'update', d: 'delete' }[l])));
    const tr = h('tr', {},
      h('td', {}, h('input', { class: 'id mono', 'aria-label': 'Policy id', value: p.id, maxlength: 64 })),
      h('td', {}, h('input', { class: 'start mono', 'aria-label': 'Start (UTC)', value: p.start, placeholder: '2024-01-01T00:00:00Z' })),
      h('td', {}, h('input', { class: 'expiry mono', 'aria-label': 'Expiry (UTC)', value: p.expiry, placeholder: '2030-01-01T00:00:00Z' })),
      h('td', {}, perms),
      h('td', {}, h('button', { type: 'button', 'aria-label': 'Remove policy', onclick: () => tr.remove() }, '✕')));
    rows.append(tr);
  };
  const form = h('form', { class: 'card', id: 'acl-form' },
    h('p', { class: 'hint' }, 'Stored access policies (at most 5) let a SAS name a policy (si=) instead of carrying its permissions and expiry; changing or removing the policy changes or revokes every SAS that names it.'),
    h('table', { class: 'props' }, h('thead', {}, h('tr', {}, h('th', {}, 'Id'), h('th', {}, 'Start'), h('th', {}, 'Expiry'), h('th', {}, 'Permissions'), h('th'))), rows),
    h('div', { class: 'row' }, h('button', { type: 'button', id: 'acl-add', onclick: () => addRow() }, '+ Policy'), h('button', { type: 'submit', class: 'primary', id: 'acl-save' }, 'Save policies')),
    status);
  body.replaceChildren(form);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let xml = '<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers>';
    for (const tr of rows.children) {
      const id = $('.id', tr).value.trim();
      if (!id) continue;
      const perms = [...tr.querySelectorAll('input[type=checkbox]:checked')].map((c) => c.value).join('');
      xml += `<SignedIdentifier><Id>${xmlEscape(id)}</Id><AccessPolicy>`;
      const s = $('.start', tr).value.trim(), x = $('.expiry', tr).value.trim();
      if (s) xml += `<Start>${xmlEscape(s)}</Start>`;
      if (x) xml += `<Expiry>${xmlEscape(x)}</Expiry>`;
      if (perms) xml += `<Permission>${perms}</Permission>`;
      xml += '</AccessPolicy></SignedIdentifier>';
    }
    xml += '</SignedIdentifiers>';
    setStatus(status, 'Saving…');
    try {
      await api.request(creds, 'PUT', '/' + api.enc(table), { query: { comp: 'acl' }, body: xml, contentType: 'application/xml' });
      setStatus(status, h('span', { class: 'ok' }, 'Saved.'));
    } catch (e) {
      setStatus(status, errorView(e));
    }
  });
  setStatus(status, 'Loading…');
  try {
    const r = await api.request(creds, 'GET', '/' + api.enc(table), { query: { comp: 'acl' } });
    const doc = new DOMParser().parseFromString(r.text, 'application/xml');
    const txt = (el, n) => (el.getElementsByTagName(n)[0] || {}).textContent || '';
    for (const si of doc.getElementsByTagName('SignedIdentifier')) {
      addRow({ id: txt(si, 'Id'), start: txt(si, 'Start'), expiry: txt(si, 'Expiry'), perms: txt(si, 'Permission') });
    }
    setStatus(status, rows.children.length ? '' : h('span', { class: 'hint' }, 'No stored access policies.'));
  } catch (e) {
    setStatus(status, errorView(e));
  }
}

// ---- SAS generator ----------------------------------------------------------------------

/**
 * sasView computes a table SAS URL in the page. With a stored access policy (si), what
 * the policy sets — permissions, start, expiry — is left out of the URL and its fields
 * show the policy's values, disabled: the service refuses a SAS that gives a field both
 * in the URL and in the policy (docs/protocol.md §8.6), and a SAS that names a policy the
 * table does not have.
 */
function sasView(body, table) {
  const in1 = (id, label, attrs = {}) => h('div', { class: 'field' }, h('label', { for: id }, label), h('input', { id, class: 'mono', autocomplete: 'off', spellcheck: 'false', ...attrs }));
  const exp = new Date(Date.now() + 24 * 3600e3).toISOString().replace(/\.\d+Z$/, 'Z');
  const out = h('textarea', { id: 'sas-out', class: 'out mono', readonly: true, 'aria-label': 'SAS URL' });
  const status = h('div', { class: 'status', id: 'sas-status' });
  const policyNote = h('div', { class: 'hint', id: 'sas-policy-note', 'aria-live': 'polite' });
  const policyList = h('datalist', { id: 'sas-policies' });
  const form = h('form', { class: 'card', id: 'sas-form' },
    h('p', { class: 'hint' }, 'Computed in this page with the account key; nothing is sent to the server. Anyone with the URL can do what it allows until it expires.'),
    h('div', { class: 'field' }, h('label', {}, 'Permissions'), ...'raud'.split('').map((l) => h('label', { class: 'perm' }, h('input', { type: 'checkbox', name: 'perm', value: l, checked: l === 'r' }), { r: 'query', a: 'add', u: 'update', d: 'delete' }[l]))),
    h('div', { class: 'row' }, in1('sas-start', 'Start (UTC, optional)', { placeholder: '2024-01-01T00:00:00Z' }), in1('sas-expiry', 'Expiry (UTC)', { value: exp }),
      in1('sas-policy', 'Stored policy id (optional)', { list: 'sas-policies' }), policyList),
    policyNote,
    h('div', { class: 'row' }, in1('sas-spk', 'From PartitionKey'), in1('sas-srk', 'From RowKey'), in1('sas-epk', 'To PartitionKey'), in1('sas-erk', 'To RowKey')),
    h('div', { class: 'row', style: 'margin-top:.6rem' }, h('button', { type: 'submit', class: 'primary', id: 'sas-make' }, 'Generate'),
      h('button', { type: 'button', id: 'sas-copy', onclick: async () => {
        try { await navigator.clipboard.writeText(out.value); setStatus(status, h('span', { class: 'ok' }, 'Copied.')); } catch { out.select(); document.execCommand('copy'); setStatus(status, h('span', { class: 'ok' }, 'Copied.')); }
      } }, 'Copy')),
    h('div', { class: 'field', style: 'margin-top:.6rem' }, out), status);
  const policyIn = $('#sas-policy', form);
  const perms = [...form.querySelectorAll('input[name=perm]')];
  const startIn = $('#sas-start', form), expiryIn = $('#sas-expiry', form);

  // The table's stored policies, id → {perms, start, expiry} ('' where unset); null
  // until read.
  let policies = null;
  const readPolicies = async () => {
    const r = await api.request(creds, 'GET', '/' + api.enc(table), { query: { comp: 'acl' }, onRetry: retrying(status) });
    const doc = new DOMParser().parseFromString(r.text, 'application/xml');
    const txt = (el, n) => (el.getElementsByTagName(n)[0] || {}).textContent || '';
    policies = new Map([...doc.getElementsByTagName('SignedIdentifier')].map((si) => [txt(si, 'Id'),
      { perms: txt(si, 'Permission'), start: txt(si, 'Start'), expiry: txt(si, 'Expiry') }]));
    policyList.replaceChildren(...[...policies.keys()].map((id) => h('option', { value: id })));
    return policies;
  };

  // What the user chose for a field while a policy sets it, given back when it no longer does.
  const saved = {};
  const fix = (key, set, show, keep, restore) => {
    if (set && !(key in saved)) saved[key] = keep();
    if (set) show();
    else if (key in saved) { restore(saved[key]); delete saved[key]; }
  };
  /** applyPolicy shows what the named policy sets, in disabled fields, and says so. */
  const applyPolicy = () => {
    const id = policyIn.value.trim();
    const pol = id && policies ? policies.get(id) : null;
    fix('perms', !!pol?.perms, () => perms.forEach((c) => { c.checked = pol.perms.includes(c.value); }),
      () => perms.map((c) => c.checked), (v) => perms.forEach((c, i) => { c.checked = v[i]; }));
    fix('start', !!pol?.start, () => { startIn.value = pol.start; }, () => startIn.value, (v) => { startIn.value = v; });
    fix('expiry', !!pol?.expiry, () => { expiryIn.value = pol.expiry; }, () => expiryIn.value, (v) => { expiryIn.value = v; });
    perms.forEach((c) => { c.disabled = !!pol?.perms; });
    startIn.disabled = !!pol?.start;
    expiryIn.disabled = !!pol?.expiry;
    if (!id || !policies) return setStatus(policyNote, '');
    if (!pol) return setStatus(policyNote, h('span', { class: 'error' }, `This table has no stored access policy "${id}" (see Access policies): the service refuses a SAS naming it.`));
    const sets = [pol.perms && `permissions (${pol.perms})`, pol.start && `start (${pol.start})`, pol.expiry && `expiry (${pol.expiry})`].filter(Boolean);
    setStatus(policyNote, sets.length
      ? `Policy ${id} sets the ${sets.join(', ')}: the URL leaves ${sets.length > 1 ? 'them' : 'it'} to the policy (the service refuses a field given both ways), so changing the policy changes what the URL allows.`
      : `Policy ${id} sets nothing: the URL carries the permissions and expiry chosen here.`);
  };
  policyIn.addEventListener('input', applyPolicy);

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const v = (id) => $('#' + id, form).value.trim();
    const id = v('sas-policy');
    let pol = null;
    if (id) {
      try {
        await readPolicies(); // as they are now: they may have changed since the page read them
      } catch (e) {
        return setStatus(status, errorView(e, 'The stored access policies could not be read.', () => form.requestSubmit()));
      }
      applyPolicy();
      pol = policies.get(id);
      if (!pol) {
        out.value = '';
        return setStatus(status, h('div', { class: 'error' }, `This table has no stored access policy "${id}": create it under Access policies first — the service refuses a SAS that names a policy the table does not have.`));
      }
    }
    // Only what the policy leaves open goes in the URL.
    const p = pol?.perms ? '' : perms.filter((c) => c.checked).map((c) => c.value).join('');
    const start = pol?.start ? '' : v('sas-start');
    const expiry = pol?.expiry ? '' : v('sas-expiry');
    if (!pol?.perms && !p) return setStatus(status, h('div', { class: 'error' }, pol ? `Choose at least one permission: policy ${id} sets none.` : 'Choose at least one permission and an expiry, or name a stored policy.'));
    if (!pol?.expiry && !expiry) return setStatus(status, h('div', { class: 'error' }, pol ? `Set an expiry: policy ${id} sets none.` : 'Choose at least one permission and an expiry, or name a stored policy.'));
    for (const t of [start, expiry]) {
      if (t && !/^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,7})?)?Z)?$/.test(t)) return setStatus(status, h('div', { class: 'error' }, 'Times are ISO 8601 UTC, e.g. 2030-01-01T00:00:00Z.'));
    }
    out.value = await api.tableSAS(creds, { table, perms: p, start, expiry, policy: id, spk: v('sas-spk'), srk: v('sas-srk'), epk: v('sas-epk'), erk: v('sas-erk') });
    setStatus(status, '');
  });
  body.replaceChildren(form);
  readPolicies().then(applyPolicy, () => { /* Generate reads them again, and says why if it cannot */ });
}

// ---- CORS -------------------------------------------------------------------------------

async function corsView() {
  const status = h('div', { class: 'status', id: 'cors-status' });
  const rows = h('tbody', { id: 'cors-rows' });
  const canWrite = creds.kind === 'key' || api.can(creds, 'corsWrite');
  const addRow = (r = { origins: '', methods: 'GET', allowed: '', exposed: '', age: '0' }) => {
    const cell = (cls, v, label) => h('td', {}, h('input', { class: cls + ' mono', value: v, 'aria-label': label, readonly: !canWrite }));
    const tr = h('tr', {}, cell('origins', r.origins, 'Allowed origins'), cell('methods', r.methods, 'Allowed methods'), cell('allowed', r.allowed, 'Allowed headers'),
      cell('exposed', r.exposed, 'Exposed headers'), cell('age', r.age, 'Max age (s)'),
      h('td', {}, canWrite ? h('button', { type: 'button', 'aria-label': 'Remove rule', onclick: () => tr.remove() }, '✕') : ''));
    rows.append(tr);
  };
  let doc = null;
  const form = h('form', { class: 'card', id: 'cors-form' }, h('h1', {}, 'CORS rules of the account'),
    h('p', { class: 'hint' }, 'Which other web origins may call this account from a browser (at most 5 rules; comma-separated lists, * for any). This console needs none: it is served by the service itself.'),
    h('table', { class: 'props' }, h('thead', {}, h('tr', {}, h('th', {}, 'Allowed origins'), h('th', {}, 'Methods'), h('th', {}, 'Allowed headers'), h('th', {}, 'Exposed headers'), h('th', {}, 'Max age (s)'), h('th'))), rows),
    canWrite ? h('div', { class: 'row' }, h('button', { type: 'button', id: 'cors-add', onclick: () => addRow() }, '+ Rule'), h('button', { type: 'submit', class: 'primary', id: 'cors-save' }, 'Save CORS rules')) : '',
    status);
  main.replaceChildren(form);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (!doc) return;
    const props = doc.documentElement;
    for (const old of [...props.getElementsByTagName('Cors')]) old.remove();
    const cors = doc.createElement('Cors');
    for (const tr of rows.children) {
      const rule = doc.createElement('CorsRule');
      for (const [tag, cls] of [['AllowedOrigins', 'origins'], ['AllowedMethods', 'methods'], ['AllowedHeaders', 'allowed'], ['ExposedHeaders', 'exposed'], ['MaxAgeInSeconds', 'age']]) {
        const el = doc.createElement(tag);
        el.textContent = $('.' + cls, tr).value.replace(/\s+/g, '');
        rule.append(el);
      }
      cors.append(rule);
    }
    props.append(cors);
    setStatus(status, 'Saving…');
    try {
      await api.request(creds, 'PUT', '/', { query: { restype: 'service', comp: 'properties' }, body: new XMLSerializer().serializeToString(doc), contentType: 'application/xml' });
      setStatus(status, h('span', { class: 'ok' }, 'Saved.'));
    } catch (e) {
      setStatus(status, errorView(e));
    }
  });
  if (creds.kind === 'sas' && !api.can(creds, 'cors')) return setStatus(status, h('span', { class: 'hint' }, 'This SAS cannot read the service properties: sign in with the account key.'));
  setStatus(status, 'Loading…');
  try {
    const r = await api.request(creds, 'GET', '/', { query: { restype: 'service', comp: 'properties' } });
    doc = new DOMParser().parseFromString(r.text, 'application/xml');
    const txt = (el, n) => (el.getElementsByTagName(n)[0] || {}).textContent || '';
    for (const rule of doc.getElementsByTagName('CorsRule')) {
      addRow({ origins: txt(rule, 'AllowedOrigins'), methods: txt(rule, 'AllowedMethods'), allowed: txt(rule, 'AllowedHeaders'), exposed: txt(rule, 'ExposedHeaders'), age: txt(rule, 'MaxAgeInSeconds') });
    }
    setStatus(status, rows.children.length ? '' : h('span', { class: 'hint' }, 'No CORS rules.'));
  } catch (e) {
    setStatus(status, errorView(e));
  }
}

// ---- Watch ------------------------------------------------------------------------------

let watchTimer = null;
function stopWatch() { if (watchTimer) clearInterval(watchTimer); watchTimer = null; }

// Each operation keeps its colour and line style whatever else appears or goes: the
// operations the server names (metrics.Operations) have fixed slots — the busiest first,
// 12 well-separated colours drawn solid, then the same colours dashed — and any other
// name takes the next free slot as it first appears, then dotted lines in hues spaced by
// the golden angle.
const PALETTE = ['#1f6fd1', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#4d4d4d', '#bcbd22', '#0b2f66', '#f2b701'];
const KNOWN_OPS = ['QueryEntities', 'InsertEntity', 'QueryEntity', 'UpdateEntity', 'MergeEntity', 'DeleteEntity', 'InsertOrReplaceEntity',
  'InsertOrMergeEntity', 'EntityGroupTransaction', 'BulkWrite', 'QueryTables', 'CreateTable',
  'DeleteTable', 'QueryTable', 'GetTableACL', 'SetTableACL', 'GetTableServiceProperties', 'SetTableServiceProperties',
  'GetTableServiceStats', 'GetTableSettings', 'SetTableSettings', 'TablePreflightRequest', 'Unknown'];
const opSlots = new Map(KNOWN_OPS.map((op, i) => [op, i]));
let nextSlot = KNOWN_OPS.length;

/** opStyle is an operation's colour and line dash (empty: solid), the same all along. */
function opStyle(op) {
  if (!opSlots.has(op)) opSlots.set(op, nextSlot++);
  const i = opSlots.get(op);
  if (i < 2 * PALETTE.length) return { color: PALETTE[i % PALETTE.length], dash: i < PALETTE.length ? [] : [6, 3] };
  return { color: `hsl(${Math.round((i * 137.508) % 360)}, 70%, 38%)`, dash: [2, 3] };
}

/** swatch draws an operation's line style for the legend. */
function swatch(op) {
  const { color, dash } = opStyle(op);
  const bg = dash.length ? `repeating-linear-gradient(90deg, ${color} 0 ${dash[0]}px, transparent ${dash[0]}px ${dash[0] + dash[1]}px)` : color;
  return h('i', { style: `background: ${bg}`, 'data-color': color, 'data-dash': dash.join(',') || 'solid' });
}

async function watchView() {
  if (creds.kind !== 'key') {
    main.replaceChildren(h('div', { class: 'card', id: 'watch-needs-key' }, h('h1', {}, 'Watch'), h('p', {}, 'Watch needs the account key: a SAS grants access to data, not to the service\'s figures. Sign out and sign in with the account name and key (or a connection string with the key).')));
    return;
  }
  const table = h('input', { id: 'watch-table', placeholder: 'all tables', class: 'mono', autocomplete: 'off', spellcheck: 'false' });
  const status = h('div', { class: 'status', id: 'watch-status' });
  const rate = h('canvas', { id: 'chart-rate', width: 640, height: 240, role: 'img', 'aria-label': 'Requests per second by operation' });
  const lat = h('canvas', { id: 'chart-latency', width: 640, height: 240, role: 'img', 'aria-label': 'Mean latency by operation' });
  const hot = h('canvas', { id: 'chart-hot', class: 'tall', width: 1280, height: 300, role: 'img', 'aria-label': 'Hot partitions' });
  const legend = h('div', { class: 'legend', id: 'watch-legend' });
  const hotList = h('table', { class: 'grid', id: 'hot-list' });
  const form = h('form', { class: 'row' }, h('div', { class: 'field' }, h('label', { for: 'watch-table' }, 'Hot partitions of table'), table), h('button', { type: 'submit' }, 'Show'));
  form.addEventListener('submit', (ev) => { ev.preventDefault(); tick(); });
  main.replaceChildren(h('h1', {}, 'Watch'), h('div', { class: 'charts' },
    h('div', {}, h('h2', {}, 'Requests per second'), rate), h('div', {}, h('h2', {}, 'Mean latency (ms)'), lat)), legend,
  h('h2', {}, 'Hot partitions (entities per second over the last minute; Azure\'s target is 2,000 per partition)'), form, hot, h('div', { class: 'gridwrap', style: 'min-height: 120px; max-height: 260px' }, hotList), status);
  const tick = async () => {
    try {
      const w = await api.watch(creds, table.value.trim());
      const ops = w.rates.operations;
      legend.replaceChildren(...ops.map((o) => h('span', { 'data-op': o.operation }, swatch(o.operation), o.operation)));
      const styles = ops.map((o) => opStyle(o.operation));
      lineChart(rate, ops.map((o) => o.requests), styles, w.rates.seconds, '/s');
      lineChart(lat, ops.map((o) => o.mean_ms), styles, w.rates.seconds, ' ms');
      const parts = [];
      for (const t of w.partitions.tables) for (const p of t.partitions) parts.push({ table: t.table, ...p });
      parts.sort((a, b) => b.entities_per_sec - a.entities_per_sec);
      hotChart(hot, parts.slice(0, 10), w.partitions.target_per_sec);
      hotList.replaceChildren(h('thead', {}, h('tr', {}, h('th', {}, 'Table'), h('th', {}, 'PartitionKey'), h('th', {}, 'Entities/s'), h('th', {}, '± error'), h('th', {}, 'Of target'))),
        h('tbody', {}, ...parts.map((p) => h('tr', { 'data-partition': p.partition_key }, h('td', {}, p.table), h('td', { class: 'mono' }, p.partition_key),
          h('td', {}, p.entities_per_sec.toFixed(1)), h('td', {}, p.error_per_sec.toFixed(1)), h('td', {}, (100 * p.of_target).toFixed(1) + ' %')))));
      setStatus(status, h('span', { class: 'hint' }, `Updated ${new Date().toLocaleTimeString()} · window ${w.partitions.window_seconds.toFixed(0)} s`));
    } catch (e) {
      setStatus(status, errorView(e));
    }
  };
  tick();
  watchTimer = setInterval(tick, 2000);
}

/** setupCanvas scales a canvas to its displayed size and returns its 2D context. */
function setupCanvas(c) {
  const r = c.getBoundingClientRect();
  const dpr = window.devicePixelRatio || 1;
  c.width = Math.max(1, Math.round(r.width * dpr));
  c.height = Math.max(1, Math.round(r.height * dpr));
  const g = c.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, r.width, r.height);
  g.font = '11px system-ui, sans-serif';
  return [g, r.width, r.height];
}

/** lineChart draws series (one per operation, in styles' colour and dash) over n seconds. */
function lineChart(c, series, styles, n, unit) {
  const [g, W, H] = setupCanvas(c);
  const L = 48, B = 20, T = 8, R = 8;
  const maxV = Math.max(1, ...series.flat());
  g.strokeStyle = '#d5dbe3';
  g.fillStyle = '#5b6675';
  for (let i = 0; i <= 4; i++) {
    const y = T + (H - T - B) * (1 - i / 4);
    g.beginPath(); g.moveTo(L, y); g.lineTo(W - R, y); g.stroke();
    g.fillText((maxV * i / 4).toFixed(maxV < 10 ? 1 : 0) + unit, 2, y + 4);
  }
  g.fillText(`-${n} s`, L, H - 4);
  g.fillText('now', W - R - 22, H - 4);
  series.forEach((s, k) => {
    g.strokeStyle = styles[k].color;
    g.setLineDash(styles[k].dash);
    g.lineWidth = 1.5;
    g.beginPath();
    s.forEach((v, i) => {
      const x = L + (W - L - R) * (i / Math.max(1, n - 1));
      const y = T + (H - T - B) * (1 - v / maxV);
      i ? g.lineTo(x, y) : g.moveTo(x, y);
    });
    g.stroke();
  });
  g.setLineDash([]);
}

function hotChart(c, parts, target) {
  const [g, W, H] = setupCanvas(c);
  const L = 220, R = 60, T = 24, B = 8;
  const maxV = Math.max(target * 1.25, ...parts.map((p) => p.entities_per_sec + p.error_per_sec));
  const rowH = (H - T - B) / 10;
  const x = (v) => L + (W - L - R) * (v / maxV);
  g.fillStyle = '#5b6675';
  if (!parts.length) g.fillText('No entity operations in the last minute.', L, T + 20);
  parts.forEach((p, i) => {
    const y = T + i * rowH;
    g.fillStyle = p.entities_per_sec > target ? '#b3261e' : '#0b63ce';
    g.fillRect(L, y + 3, Math.max(1, x(p.entities_per_sec) - L), rowH - 6);
    g.fillStyle = '#1b2430';
    const label = `${p.table} / ${p.partition_key}`;
    g.fillText(label.length > 34 ? label.slice(0, 33) + '…' : label, 4, y + rowH / 2 + 4);
    g.fillText(p.entities_per_sec.toFixed(0) + '/s', x(p.entities_per_sec) + 4, y + rowH / 2 + 4);
  });
  // The target line: one partition's 2,000 entities per second.
  g.strokeStyle = '#b3261e';
  g.setLineDash([6, 4]);
  g.beginPath(); g.moveTo(x(target), T - 6); g.lineTo(x(target), H - B); g.stroke();
  g.setLineDash([]);
  g.fillStyle = '#b3261e';
  g.fillText(`target ${target.toLocaleString('en')}/s`, x(target) - 40, T - 10);
}

route();

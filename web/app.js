// Durable AI Jobs web console: submit jobs, follow them, answer their questions.
// Plain ES module, no dependencies. Every piece of data reaches the page through textContent or
// element properties (never innerHTML), and every request goes to this origin's /api.

import { followStream } from './stream.js';
import { createDraft, createTimeline, fmtSpan } from './timeline.js';
import { renderGraph, setNodeKinds } from './graph.js';
import { renderFork } from './fork.js';

const API = '/api/jobs';
const KEY_STORAGE = 'durable-ai-jobs.function-key';
const LOGIN_PATH = '/.auth/login/aad';
const LOGOUT_PATH = '/.auth/logout';
const POLL_MS = 1000;
const MAX_BACKOFF_MS = 10000;
const LOG_PAGE = 200;
const JOB_PAGE = 20;
const MAX_TABLE_ROWS = 200;
// Display text of the server's values (job statuses, step states, question forms): the catalog's labels, each value
// shown as itself until the catalog has loaded or when it has no text.
const labelsFor = (group) => new Proxy({}, { get: (_, value) => (catalog && catalog.labels && catalog.labels[group] && catalog.labels[group][value]) || String(value) });
const STATUS_LABELS = labelsFor('job_status');
const STEP_LABELS = labelsFor('step_state');
const KIND_LABELS = {
  plan: 'Plan',
  consult_rag: 'Documents',
  execute_azure_sql: 'SQL',
  generate_response: 'Answer',
  ask_user: 'Question',
  request_user_feedback: 'Question',
  get_job_state: 'Job state',
};
const WAITING_TITLES = labelsFor('waiting_form');
// What the server publishes for clients (GET /api/catalog, read from its registries): each step kind's editable
// fields, which error codes a plain retry can cure, the tool-name pattern. The console keeps no copy of these
// rules; until the catalog has loaded, an edit form shows the step input's own text fields.
let catalog = null;
let catalogLoading = null;

/** Load the catalog once (after a failure, e.g. no key yet, the next call tries again); resolves to it or null. */
function loadCatalog() {
  if (catalog) return Promise.resolve(catalog);
  if (!catalogLoading) {
    catalogLoading = api('/api/catalog')
      .then((c) => {
        catalog = c;
        setNodeKinds(c.node_kinds); // the graph's edges and node summaries are the catalog's
        applyRequestLimits(c.job_request_schema);
        applyRequestChoices(c);
        if (state.jobs.items.length) renderJobs(); // the statuses' labels are the catalog's
        return c;
      })
      .catch(() => null)
      .finally(() => (catalogLoading = null));
  }
  return catalogLoading;
}

/** The schema of a dotted field path in a JSON Schema (through properties, $ref into $defs and array items), or null. */
function schemaAt(schema, path) {
  const resolve = (s) => {
    if (s && s.$ref && schema.$defs) return resolve(schema.$defs[s.$ref.split('/').pop()]);
    // An optional field (anyOf [T, null]) is edited as T.
    if (s && Array.isArray(s.anyOf)) return resolve(s.anyOf.find((m) => m.type !== 'null') || null);
    return s;
  };
  let at = resolve(schema);
  for (const key of path.split('.')) {
    at = resolve(at && at.properties ? at.properties[key] : null);
    if (!at) return null;
  }
  return at;
}

/**
 * The job form's limits are the request body's (the catalog's job_request_schema): each control that names its
 * body field (data-field) takes that field's length, range or count, so the console keeps no copy of them.
 */
function applyRequestLimits(schema) {
  if (!schema) return;
  for (const el of document.querySelectorAll('#job-form [data-field]')) {
    const field = schemaAt(schema, el.dataset.field);
    if (!field) continue;
    if (field.maxLength != null) el.setAttribute('maxlength', String(field.maxLength));
    if (field.minimum != null) el.setAttribute('min', String(field.minimum));
    if (field.maximum != null) el.setAttribute('max', String(field.maximum));
    if (field.maxItems != null) el.dataset.maxItems = String(field.maxItems);
    if (el.type === 'number' && field.default != null) el.setAttribute('placeholder', String(field.default));
  }
  updateCounter();
}

/** The job form's closed choices (mode, SQL approval) and the list's status filter, from the catalog: each select
 * lists its enum's values (the request schema's, the job statuses) with their labels, at the schema's default. */
function applyRequestChoices(c) {
  const fill = (el, values, group, dflt, first = []) => {
    if (!el) return;
    const keep = el.value;
    const labels = (c.labels && c.labels[group]) || {};
    el.replaceChildren(...first, ...values.map((v) => h('option', { value: v }, labels[v] || v)));
    el.value = values.includes(keep) ? keep : dflt ?? (first.length ? '' : values[0]);
  };
  for (const el of document.querySelectorAll('#job-form select[data-field]')) {
    const field = schemaAt(c.job_request_schema, el.dataset.field);
    if (field && Array.isArray(field.enum)) fill(el, field.enum.map(String), el.dataset.field, field.default);
  }
  fill($('#status-filter'), c.job_statuses, 'job_status', '', [h('option', { value: '' }, 'All statuses')]);
}

/** A step kind's editable fields as the catalog publishes them, or null when it is not loaded or lists none. */
function editFieldsOf(kind) {
  const entry = catalog && catalog.step_kinds.find((k) => k.kind === kind);
  if (!entry) return null;
  return entry.editable_fields.map((f) => ({ name: f.name, label: f.label, kind: f.input, hint: f.hint, required: f.required }));
}

/** What a fork may edit of a workflow node of this kind (the catalog's ``fork_edits``), or null. */
function nodeForkEdits(kind) {
  const entry = catalog && catalog.node_kinds.find((k) => k.kind === kind);
  return entry ? entry.fork_edits || null : null;
}

/** Fields as the catalog publishes them, in the shape fieldEditors takes. */
function catalogFields(fields) {
  return fields.map((f) => ({ name: f.name, label: f.label, kind: f.input, hint: f.hint, required: f.required }));
}

/** The shape of a step kind's result as the catalog publishes it (sql, documents, answer), or null. */
function resultShape(kind) {
  const entry = catalog && catalog.step_kinds.find((k) => k.kind === kind);
  return entry ? entry.result || null : null;
}

/** Whether a plain retry can cure a failure with this code (the catalog's word; unknown: no). */
function isRetryable(code) {
  return Boolean(catalog && catalog.error_codes.some((c) => c.code === code && c.retryable));
}

const OFFLINE_MODEL = 'offline';
const OFFLINE_NOTE = 'A deterministic, keyword-matching stand-in, not an LLM.';
const SQL_BREAKS = ['SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT', 'OFFSET', 'UNION ALL', 'UNION', 'WITH',
  'LEFT OUTER JOIN', 'LEFT JOIN', 'RIGHT JOIN', 'INNER JOIN', 'FULL OUTER JOIN', 'CROSS JOIN', 'JOIN'];
// The Executor's turn in the view's log: a task line of the agent_turn activity with no step of its own (the log
// entry's typed fields, api/view_log.py line_facts; the line's English is for people and is never parsed).
const isTurnLine = (entry) => entry.topic === 'task' && entry.activity === 'agent_turn' && !entry.step_id;

// ----- small DOM helpers ------------------------------------------------------------------------

/** Create an element; props are attributes (plus class, text, value, dataset, on); children are nodes or text. */
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') el.className = value;
    else if (name === 'text') el.textContent = String(value);
    else if (name === 'value') el.value = String(value);
    else if (name === 'dataset') Object.assign(el.dataset, value);
    else if (name === 'on') for (const [type, fn] of Object.entries(value)) el.addEventListener(type, fn);
    else if (/^on/i.test(name)) throw new Error(`inline handler ${name} refused`);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const $ = (selector) => document.querySelector(selector);

function fmtNumber(n) {
  return typeof n === 'number' ? n.toLocaleString('en-US') : '—';
}

/** Costs of one table share one precision: $0 when all are zero, else 4 decimals (6 when any is under a cent). */
function costDigits(costs) {
  const nums = costs.filter((c) => typeof c === 'number');
  if (nums.every((c) => c === 0)) return 0;
  return nums.some((c) => c > 0 && c < 0.01) ? 6 : 4;
}

function fmtCost(c, digits = costDigits([c])) {
  if (typeof c !== 'number') return '—';
  return digits === 0 ? '$0' : `$${c.toFixed(digits)}`;
}

/** An amount with its currency code ("USD 0.0000143"): three significant digits under a cent, else 2 to 4 decimals. */
function fmtMoney(amount, currency) {
  if (typeof amount !== 'number') return '—';
  const small = amount !== 0 && Math.abs(amount) < 0.01;
  const digits = small ? { maximumSignificantDigits: 3 } : { minimumFractionDigits: 2, maximumFractionDigits: 4 };
  try {
    return new Intl.NumberFormat('en-US', { style: 'currency', currency: currency || 'USD', currencyDisplay: 'code', ...digits }).format(amount);
  } catch {
    return `${currency || ''} ${amount}`.trim(); // a currency code Intl does not know: shown as the server wrote it
  }
}

function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/** A quantity as the ledger gives it (up to 6 decimals), grouped. */
function fmtQuantity(q) {
  return typeof q === 'number' ? q.toLocaleString('en-US', { maximumFractionDigits: 6 }) : '—';
}

// ----- numbers and SQL --------------------------------------------------------------------------

const numberFormats = new Map();

/** One Intl.NumberFormat per (decimals, grouping): every number of a column is shown the same way. */
function numberFormat(decimals, grouping) {
  const key = `${decimals}:${grouping}`;
  if (!numberFormats.has(key)) {
    numberFormats.set(key, new Intl.NumberFormat('en-US', { minimumFractionDigits: decimals, maximumFractionDigits: decimals, useGrouping: grouping }));
  }
  return numberFormats.get(key);
}

const PLAIN_NUMBER = /^[-+]?\d+(\.\d+)?$/;
// Text a writer already formatted ("$1,234.50", "12.5%", "-3"): right-aligned like numbers, kept as written.
const NUMERIC_TEXT = /^[-+−]?[$€£¥]?\s?\d[\d,]*(\.\d+)?\s?(%|[kKmMbB])?$/;

function fractionDigits(n) {
  const text = String(n);
  if (/e/i.test(text)) return 2;
  const dot = text.indexOf('.');
  return dot < 0 ? 0 : text.length - dot - 1;
}

/** How a column's numbers are shown: one number of decimals for all (2 to 4, or 0), grouped unless an id or a year. */
function columnFormat(name, values) {
  const nums = values.map((v) => (typeof v === 'string' && PLAIN_NUMBER.test(v.trim()) ? Number(v) : v)).filter((v) => typeof v === 'number' && Number.isFinite(v));
  // Whole numbers stay whole; a column with fractions shows at least 2 decimals (317754.1 is 317,754.10).
  const most = Math.min(4, nums.reduce((m, v) => Math.max(m, fractionDigits(v)), 0));
  const decimals = most === 0 ? 0 : Math.max(2, most);
  // Identifiers and years are labels, not quantities: "2,025" or "order 1,042" would misread.
  const grouping = !/(^|_|\s)(id|year|yr|zip|code)$/i.test(String(name).trim());
  return numberFormat(decimals, grouping);
}

/** A SQL statement with each main clause on its own line (only whitespace outside strings and comments changes). */
function formatSql(sql) {
  const text = String(sql || '');
  const out = [];
  let depth = 0;
  let i = 0;
  const keywordAt = (pos) => {
    for (const kw of SQL_BREAKS) {
      const re = new RegExp(`^${kw.replace(/ /g, '\\s+')}(?![\\w$])`, 'i');
      const m = re.exec(text.slice(pos, pos + 40));
      if (m) return m[0];
    }
    return null;
  };
  while (i < text.length) {
    const ch = text[i];
    const two = text.slice(i, i + 2);
    let end = -1;
    if (ch === "'" || ch === '"' || ch === '`' || ch === '[') {
      const close = ch === '[' ? ']' : ch;
      end = i + 1;
      while (end < text.length) {
        if (text[end] === close) {
          if (close !== ']' && text[end + 1] === close) end += 2;
          else break;
        } else end += 1;
      }
      end = Math.min(text.length, end + 1);
    } else if (two === '--') {
      end = text.indexOf('\n', i);
      end = end < 0 ? text.length : end;
    } else if (two === '/*') {
      end = text.indexOf('*/', i + 2);
      end = end < 0 ? text.length : end + 2;
    }
    if (end > i) {
      out.push(text.slice(i, end));
      i = end;
      continue;
    }
    if (/\s/.test(ch)) {
      let j = i;
      while (j < text.length && /\s/.test(text[j])) j += 1;
      const kw = out.length ? keywordAt(j) : null;
      out.push(kw ? `\n${'  '.repeat(depth)}` : text.slice(i, j));
      i = j;
      continue;
    }
    if (ch === '(') depth += 1;
    if (ch === ')') depth = Math.max(0, depth - 1);
    out.push(ch);
    i += 1;
  }
  return out.join('');
}

function parseTime(value) {
  if (!value) return null;
  const t = new Date(value);
  return Number.isNaN(t.getTime()) ? null : t;
}

// Every time shown carries its zone (the browser's): "10:58:43 AM UTC", "Nov 28, 2026, 10:58:43 AM GMT+1".
const dateTimeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'long' });
const timeFormat = new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit', second: '2-digit', timeZoneName: 'short' });

function timeEl(value, { short = false } = {}) {
  const t = parseTime(value);
  if (!t) return h('span', { class: 'muted', text: '—' });
  return h('time', { datetime: t.toISOString(), title: t.toISOString() }, (short ? timeFormat : dateTimeFormat).format(t));
}

function fmtDuration(start, end) {
  const a = parseTime(start);
  const b = parseTime(end);
  if (!a || !b) return '—';
  return fmtMs(b - a);
}

function fmtMs(value) {
  const ms = Math.max(0, Math.round(value));
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

function badge(status, labels = STATUS_LABELS, prefix = 'status') {
  return h('span', { class: `badge ${prefix}-${status}` }, labels[status] || status || 'unknown');
}

function errorBox(err, { title } = {}) {
  return h(
    'div',
    { class: 'error-body' },
    title ? h('strong', {}, title, ' ') : null,
    err.code ? h('code', { class: 'error-code' }, err.code) : null,
    err.code ? ' ' : null,
    h('span', { class: 'error-message' }, err.message || 'Something went wrong.'),
    err.field ? h('span', { class: 'error-field' }, ' (field ', h('code', {}, err.field), ')') : null,
  );
}

function showAlert(el, err, opts) {
  el.replaceChildren(errorBox(err, opts));
  el.hidden = false;
}

function clearAlert(el) {
  el.replaceChildren();
  el.hidden = true;
}

// ----- the API -----------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message, field, errors) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || null;
    // Every problem of a rejected definition ({path, code, message, node}), for the definitions pages.
    this.errors = Array.isArray(errors) ? errors : [];
  }
}

// The key lives in sessionStorage: it is gone when the tab closes and no other tab or later visitor reads it.
function getKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) || '';
  } catch {
    return '';
  }
}

function setKey(value) {
  try {
    if (value) sessionStorage.setItem(KEY_STORAGE, value);
    else sessionStorage.removeItem(KEY_STORAGE);
  } catch {
    // Storage can be off (private mode); the key then lives only in the field.
  }
}

function forgetStoredKey() {
  // Earlier versions kept the key in localStorage, where it outlived the session: remove it.
  try {
    localStorage.removeItem(KEY_STORAGE);
  } catch {
    // Storage can be off; nothing was stored then.
  }
}

/** Call the job API; resolves to the parsed body, rejects with an ApiError carrying the API's error code. */
async function api(path, { method = 'GET', body, signal } = {}) {
  const headers = { Accept: 'application/json' };
  if (!state.auth.signIn) {
    const key = $('#function-key').value.trim() || getKey();
    if (key) headers['x-functions-key'] = key;
  }
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let resp;
  try {
    resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: 'no-store',
      credentials: 'same-origin',
    });
  } catch (err) {
    if (err && err.name === 'AbortError') throw err;
    throw new ApiError(0, 'NETWORK_ERROR', 'The server could not be reached.');
  }
  const text = await resp.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!resp.ok) {
    const error = data && typeof data === 'object' ? data.error : null;
    if (error && error.code) throw new ApiError(resp.status, error.code, error.message, error.field, error.errors);
    if ((resp.status === 401 || resp.status === 403) && state.auth.signIn) {
      throw new ApiError(resp.status, 'UNAUTHENTICATED', 'You are not signed in, or your sign-in expired. Use "Sign in" at the top of the page.');
    }
    if (resp.status === 401 || resp.status === 403) {
      throw new ApiError(resp.status, 'UNAUTHORIZED', 'The function key is missing or wrong. Enter it at the top of the page.');
    }
    throw new ApiError(resp.status, `HTTP_${resp.status}`, `The server answered ${resp.status} ${resp.statusText}.`.trim());
  }
  return data;
}

function jobUrl(id, suffix = '') {
  return `${API}/${encodeURIComponent(id)}${suffix}`;
}

function showBanner(err) {
  const banner = $('#banner');
  if (!err) {
    clearAlert(banner);
    return;
  }
  showAlert(banner, err);
}

function isAuthError(err) {
  return Boolean(err) && (err.status === 401 || err.status === 403);
}

/** The function key typed into the field (or kept for this tab). */
function currentKey() {
  return $('#function-key').value.trim() || getKey();
}

/**
 * What the lists say while the API cannot be read for lack of a (right) key or sign-in: a calm, plain state
 * rather than an error banner, since nothing the user did failed. Returns true when ``err`` was such a refusal.
 */
function handleAuth(err) {
  if (!isAuthError(err)) return false;
  if (state.auth.signIn) showLocked('Sign in (top right) to see your jobs.');
  else if (!currentKey()) {
    setKeyState('none');
    showLocked('Enter the function key at the top of the page to see the jobs.');
  } else {
    setKeyState('rejected', err.status);
    setKey(''); // a rejected key is not kept for the tab
    showLocked(`The function key was rejected (${err.status}): enter the right key at the top of the page.`);
  }
  return true;
}

function showLocked(message) {
  const el = $('#jobs-locked');
  el.textContent = message;
  el.hidden = false;
  $('#job-list').replaceChildren();
  $('#jobs-empty').hidden = true;
  $('#more-jobs').hidden = true;
  state.jobs.items = [];
  state.jobs.cursor = null;
  const d = state.detail;
  if (d && d.locked) {
    d.locked.textContent = state.auth.signIn ? 'Sign in to open this job.' : message.replace('see the jobs', 'open this job');
    d.locked.hidden = false;
  }
}

function hideLocked() {
  $('#jobs-locked').hidden = true;
  const d = state.detail;
  if (d && d.locked) d.locked.hidden = true;
}

// ----- sign-in (App Service Authentication) -----------------------------------------------------

/** The signed-in user from GET /.auth/me: 404 means Easy Auth is off (the function key is used). */
async function detectSignIn() {
  let resp;
  try {
    resp = await fetch('/.auth/me', { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' });
  } catch {
    return { signIn: false, user: null };
  }
  if (resp.status === 401 || resp.status === 403) return { signIn: true, user: null };
  if (!resp.ok) return { signIn: false, user: null };
  let data = null;
  try {
    data = await resp.json();
  } catch {
    return { signIn: false, user: null };
  }
  if (!Array.isArray(data)) return { signIn: false, user: null };
  const me = data[0];
  if (!me || typeof me !== 'object') return { signIn: true, user: null };
  const claims = Array.isArray(me.user_claims) ? me.user_claims : [];
  const named = claims.find((c) => c && (c.typ === 'name' || c.typ === 'preferred_username'));
  const user = String((named && named.val) || me.user_id || 'signed-in user');
  return { signIn: true, user };
}

function initSignIn() {
  const box = $('#auth-box');
  const who = $('#auth-user');
  const link = $('#auth-link');
  $('#key-form').hidden = true;
  box.hidden = false;
  const here = location.pathname + location.search;
  if (state.auth.user) {
    who.textContent = `Signed in as ${state.auth.user}`;
    link.textContent = 'Sign out';
    link.href = `${LOGOUT_PATH}?post_logout_redirect_uri=${encodeURIComponent(here)}`;
  } else {
    who.textContent = 'Not signed in';
    link.textContent = 'Sign in';
    link.href = `${LOGIN_PATH}?post_login_redirect_uri=${encodeURIComponent(here + location.hash)}`;
  }
}

// ----- function key -----------------------------------------------------------------------------

const KEY_STATES = {
  none: 'Not set',
  unchecked: 'Not checked yet',
  checking: 'Checking the key…',
  accepted: 'Key accepted · kept for this tab',
  rejected: 'Key rejected',
  unreachable: 'Not checked: the server could not be reached',
};

/** Say what is known about the key: a key is "accepted" only after the API took it, never on typing. */
function setKeyState(name, status) {
  const el = $('#key-state');
  state.keyState = name;
  el.textContent = name === 'rejected' && status ? `${KEY_STATES.rejected} (${status})` : KEY_STATES[name];
  el.dataset.state = name;
}

/** Check the key with the smallest API read; keep it for this tab only when the API accepted it. */
async function verifyKey() {
  const value = $('#function-key').value.trim();
  if (!value) {
    setKey('');
    setKeyState('none');
    return false;
  }
  setKeyState('checking');
  try {
    await api(`${API}?limit=1`);
  } catch (err) {
    if ($('#function-key').value.trim() !== value) return false; // typed over meanwhile: that key decides
    if (isAuthError(err)) {
      setKey('');
      handleAuth(err);
    } else setKeyState('unreachable');
    return false;
  }
  if ($('#function-key').value.trim() !== value) return false;
  setKey(value);
  setKeyState('accepted');
  return true;
}

function initKey() {
  const input = $('#function-key');
  const toggle = $('#key-toggle');
  input.value = getKey();
  setKeyState(input.value ? 'unchecked' : 'none');
  input.addEventListener('input', () => setKeyState(input.value.trim() ? 'unchecked' : 'none'));
  let applied = input.value.trim();
  input.addEventListener('change', async () => {
    // Browsers fire "change" again on blur; only a new key reloads what the page shows.
    if (input.value.trim() === applied) return;
    applied = input.value.trim();
    if (!(await verifyKey())) return;
    hideLocked();
    loadJobs({ reset: true });
    if (state.detail && state.detail.halted) resumeDetail(state.detail);
  });
  $('#key-form').addEventListener('submit', (event) => event.preventDefault());
  toggle.addEventListener('click', () => {
    const show = input.type === 'password';
    input.type = show ? 'text' : 'password';
    toggle.textContent = show ? 'Hide' : 'Show';
    toggle.setAttribute('aria-pressed', String(show));
  });
}

// ----- submitting a job -------------------------------------------------------------------------

function clearFieldErrors(form) {
  for (const el of form.querySelectorAll('[aria-invalid]')) {
    el.removeAttribute('aria-invalid');
    el.removeAttribute('aria-errormessage');
  }
}

/**
 * Mark the form control of an error's field: each control names the body field it fills (data-field, in
 * index.html), and the error's field is a dotted path into the body (api/contract ErrorDetail): the control is
 * the one whose field is the path or the nearest part of it ("tools.3", the fourth tool, is the tools box).
 */
function markField(field) {
  const form = $('#job-form');
  const parts = String(field || '').split('.').filter(Boolean);
  let el = null;
  for (let n = parts.length; n > 0 && !el; n -= 1) el = form.querySelector(`[data-field="${CSS.escape(parts.slice(0, n).join('.'))}"]`);
  if (!el) return;
  el.setAttribute('aria-invalid', 'true');
  el.setAttribute('aria-errormessage', 'form-error');
  el.focus();
}

function optionalInt(id) {
  const raw = document.getElementById(id).value.trim();
  if (raw === '') return undefined;
  const n = Number(raw);
  return Number.isFinite(n) ? n : raw;
}

/** The family tools typed by the user: names split on commas and whitespace, each once, in order. */
function typedTools() {
  const names = $('#agent-tools').value.split(/[\s,]+/).filter(Boolean);
  return [...new Set(names)];
}

/** The first problem with the typed tools, or null (the same rules as the server's, said in words). */
function toolsProblem(names) {
  // The server's pattern from the catalog (the server checks again, for real).
  const pattern = catalog ? new RegExp(catalog.tool_name_pattern) : null;
  const bad = pattern && names.find((n) => !pattern.test(n));
  if (bad) return `“${bad}” is not a tool name: use family.tool, e.g. function.growth_rate (letters, digits, _ . -).`;
  const most = Number($('#agent-tools').dataset.maxItems || 0); // the request schema's (applyRequestLimits)
  if (most && names.length > most) return `At most ${most} tools may be allowed (${names.length} given).`;
  return null;
}

function showModeFields() {
  $('#agent-fields').hidden = $('#mode').value !== 'agent';
}

function updateCounter() {
  const used = $('#question').value.length;
  const el = $('#question-count');
  // The limit is the request schema's, set on the box when the catalog loads (applyRequestLimits).
  const most = $('#question').maxLength > 0 ? $('#question').maxLength : null;
  el.textContent = most ? `${fmtNumber(used)} / ${fmtNumber(most)} characters` : `${fmtNumber(used)} characters`;
  el.classList.toggle('near', Boolean(most) && used >= most * 0.9);
}

function initForm() {
  const form = $('#job-form');
  const errorEl = $('#form-error');
  const button = $('#submit-job');
  $('#question').addEventListener('input', updateCounter);
  updateCounter();
  $('#mode').addEventListener('change', showModeFields);
  showModeFields();
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    clearAlert(errorEl);
    const question = $('#question').value.trim();
    if (!question) {
      showAlert(errorEl, { code: 'INVALID_REQUEST', message: 'Enter a question.', field: 'question' });
      markField('question');
      return;
    }
    const mode = $('#mode').value;
    const body = { question, approval: { sql: $('#approval').value } };
    if (mode !== 'deterministic') body.mode = mode;
    if (mode === 'agent') {
      const tools = typedTools();
      await loadCatalog(); // its tool-name pattern (loaded once; null: the server alone checks)
      const problem = toolsProblem(tools);
      if (problem) {
        showAlert(errorEl, { code: 'INVALID_REQUEST', message: problem, field: 'tools' });
        markField('tools');
        return;
      }
      if (tools.length) body.tools = tools;
      const agent = {};
      const maxTurns = optionalInt('max-turns');
      const maxCalls = optionalInt('max-tool-calls');
      if (maxTurns !== undefined) agent.max_turns = maxTurns;
      if (maxCalls !== undefined) agent.max_tool_calls = maxCalls;
      if (Object.keys(agent).length) body.agent = agent;
    }
    const constraints = {};
    const maxTokens = optionalInt('max-tokens');
    const budget = optionalInt('budget-tokens');
    if (maxTokens !== undefined) constraints.max_tokens = maxTokens;
    if (budget !== undefined) constraints.budget = { max_total_tokens: budget };
    if (Object.keys(constraints).length) body.constraints = constraints;
    button.disabled = true;
    button.textContent = 'Submitting…';
    try {
      const created = await api(API, { method: 'POST', body });
      showBanner(null);
      location.hash = `job=${encodeURIComponent(created.id)}`;
      loadJobs({ reset: true });
    } catch (err) {
      if (err.name === 'AbortError') return;
      handleAuth(err);
      showAlert(errorEl, err, { title: 'The job was not accepted:' });
      if (err.field) markField(err.field);
    } finally {
      button.disabled = false;
      button.textContent = 'Run job';
    }
  });
}

// ----- the job list -----------------------------------------------------------------------------

const state = {
  jobs: { filter: '', search: '', items: [], cursor: null, request: 0 },
  detail: null,
  // signIn: App Service Authentication is on (the console signs in instead of asking for a key).
  auth: { signIn: false, user: null },
  // What is known about the function key: none, unchecked, checking, accepted, rejected, unreachable.
  keyState: 'none',
};

function jobItem(job) {
  const selected = state.detail && state.detail.id === job.id;
  return h(
    'li',
    { class: 'job-item', dataset: { jobId: job.id } },
    h(
      'a',
      { href: `#job=${encodeURIComponent(job.id)}`, class: 'job-link', 'aria-current': selected ? 'true' : null },
      h('span', { class: 'job-question' }, job.question || '(no question)'),
      h('span', { class: 'job-meta' }, badge(job.status), ' ', timeEl(job.created_at), listCost(job.cost)),
    ),
  );
}

/** A listed job's cost (the server's summary, kept once the job ended): its priced total and the meters with no price. */
function listCost(cost) {
  if (!cost) return null;
  const unknown = cost.unknown ? ` + ${cost.unknown} unknown` : '';
  const title = cost.unknown ? `price unknown for ${plural(cost.unknown, 'meter')}: not in the total` : 'every meter priced';
  return h('span', { class: 'job-cost', title }, `${fmtMoney(cost.total, cost.currency)}${unknown}`);
}

/** Whether a listed job matches the search words (all of them, in its question, id or status, any case). */
function matchesSearch(job, words) {
  const text = `${job.question || ''} ${job.id} ${job.status} ${STATUS_LABELS[job.status] || ''}`.toLowerCase();
  return words.every((w) => text.includes(w));
}

function renderJobs() {
  const list = $('#job-list');
  const words = state.jobs.search.toLowerCase().split(/\s+/).filter(Boolean);
  const shown = words.length ? state.jobs.items.filter((j) => matchesSearch(j, words)) : state.jobs.items;
  list.replaceChildren(...shown.map(jobItem));
  $('#jobs-empty').hidden = state.jobs.items.length > 0;
  $('#more-jobs').hidden = !state.jobs.cursor;
  // The search reads the jobs loaded so far: it says so, and "More jobs" loads further pages to search.
  $('#job-search-count').textContent = words.length
    ? `${shown.length} of ${state.jobs.items.length} loaded job${state.jobs.items.length === 1 ? '' : 's'} match${state.jobs.cursor ? '; more jobs can be loaded below' : ''}.`
    : '';
}

async function loadJobs({ reset = false } = {}) {
  const jobs = state.jobs;
  const request = ++jobs.request;
  const params = new URLSearchParams({ limit: String(JOB_PAGE) });
  if (jobs.filter) params.set('status', jobs.filter);
  if (!reset && jobs.cursor) params.set('cursor', jobs.cursor);
  const list = $('#job-list');
  list.setAttribute('aria-busy', 'true');
  $('#more-jobs').disabled = true;
  try {
    const page = await api(`${API}?${params}`);
    if (request !== jobs.request) return;
    clearAlert($('#jobs-error'));
    hideLocked();
    if (!state.auth.signIn && currentKey() && state.keyState !== 'accepted') {
      setKey(currentKey());
      setKeyState('accepted');
    }
    loadCatalog(); // a no-op once loaded; the first time, now that the API answers this caller
    jobs.items = reset ? page.jobs : jobs.items.concat(page.jobs.filter((j) => !jobs.items.some((k) => k.id === j.id)));
    jobs.cursor = page.next_cursor || null;
    renderJobs();
  } catch (err) {
    if (request !== jobs.request) return;
    if (!handleAuth(err)) showAlert($('#jobs-error'), err, { title: 'Jobs could not be listed:' });
  } finally {
    if (request === jobs.request) {
      list.setAttribute('aria-busy', 'false');
      $('#more-jobs').disabled = false;
    }
  }
}

function updateListedStatus(id, status) {
  const item = state.jobs.items.find((j) => j.id === id);
  if (!item || item.status === status) return;
  item.status = status;
  const el = document.querySelector(`.job-item[data-job-id="${CSS.escape(id)}"]`);
  if (el) el.replaceWith(jobItem(item));
}

/** Once the open job has ended, its list row shows the same ledger total as its header (until the list reloads). */
function updateListedCost(v) {
  const item = state.jobs.items.find((j) => j.id === v.id);
  if (!item || item.cost || !v.finished || !v.cost || v.cost.total == null) return;
  item.cost = { total: v.cost.total, currency: v.cost.currency, unknown: (v.cost.unknown || []).length };
  const el = document.querySelector(`.job-item[data-job-id="${CSS.escape(v.id)}"]`);
  if (el) el.replaceWith(jobItem(item));
}

function markSelected(id) {
  for (const link of document.querySelectorAll('.job-link')) {
    const mine = link.closest('.job-item').dataset.jobId === id;
    if (mine) link.setAttribute('aria-current', 'true');
    else link.removeAttribute('aria-current');
  }
}

function initJobs() {
  $('#status-filter').addEventListener('change', (event) => {
    state.jobs.filter = event.target.value;
    state.jobs.cursor = null;
    loadJobs({ reset: true });
  });
  $('#refresh-jobs').addEventListener('click', () => loadJobs({ reset: true }));
  $('#job-search').addEventListener('input', (event) => {
    state.jobs.search = event.target.value;
    renderJobs();
  });
  $('#more-jobs').addEventListener('click', () => loadJobs());
}

// ----- answer text ------------------------------------------------------------------------------

/** Render the model's answer: paragraphs, "- " lists, pipe tables and [source] markers, all as text nodes. */
function renderAnswerText(text, citations) {
  const known = new Set((citations || []).map((c) => c.source_id));
  const inline = (line) => {
    const out = [];
    const re = /\[([^\]\s]+)\]/g;
    let last = 0;
    let m;
    while ((m = re.exec(line)) !== null) {
      if (!known.has(m[1])) continue;
      if (m.index > last) out.push(line.slice(last, m.index));
      const id = m[1];
      out.push(h('button', { type: 'button', class: 'cite-mark', title: `Show source ${id}`, on: { click: () => openSource(id) } }, id));
      last = m.index + m[0].length;
    }
    if (last < line.length) out.push(line.slice(last));
    return out;
  };
  const root = h('div', { class: 'answer-text' });
  const cells = (l) => l.trim().replace(/^\||\|$/g, '').split('|').map((c) => c.trim());
  const isRule = (l) => /^\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?$/.test(l.trim());
  const kindOf = (l) => (l.trim() === '' ? 'blank' : l.trim().startsWith('|') ? 'table' : /^\s*[-*] /.test(l) ? 'list' : 'text');
  // Group consecutive lines of one kind: paragraphs, "- " lists and pipe tables.
  const groups = [];
  for (const line of String(text).split('\n')) {
    const kind = kindOf(line);
    const last = groups[groups.length - 1];
    if (last && last.kind === kind) last.lines.push(line);
    else groups.push({ kind, lines: [line] });
  }
  for (const { kind, lines } of groups) {
    if (kind === 'table' && lines.length >= 2) {
      const rows = lines.slice(isRule(lines[1]) ? 2 : 1).map(cells);
      root.append(dataTable(cells(lines[0]), rows, { label: 'Table in the answer' }));
    } else if (kind === 'list') {
      root.append(h('ul', {}, lines.map((l) => h('li', {}, inline(l.replace(/^\s*[-*] /, ''))))));
    } else if (kind !== 'blank') {
      const p = h('p');
      lines.forEach((l, i) => {
        if (i) p.append(h('br'));
        append(p, inline(l));
      });
      root.append(p);
    }
  }
  return root;
}

function cellText(value) {
  if (value === null || value === undefined) return h('span', { class: 'null' }, 'NULL');
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

function dataTable(columns, rows, { caption, label } = {}) {
  const shown = rows.slice(0, MAX_TABLE_ROWS).map((row) => (Array.isArray(row) ? row : columns.map((c) => row[c])));
  // One format per column: the same decimals, thousands separators, right-aligned (numbers as text too).
  const formats = columns.map((c, i) => columnFormat(c, shown.map((r) => r[i])));
  const numeric = columns.map((c, i) => {
    const values = shown.map((r) => r[i]).filter((v) => v !== null && v !== undefined && v !== '');
    return values.length > 0 && values.every((v) => typeof v === 'number' || (typeof v === 'string' && NUMERIC_TEXT.test(v.trim())));
  });
  const cell = (v, i) => {
    if (!numeric[i] || v === null || v === undefined) return h('td', { class: numeric[i] ? 'num' : null }, cellText(v));
    const n = typeof v === 'number' ? v : PLAIN_NUMBER.test(v.trim()) ? Number(v) : null;
    return h('td', { class: 'num', title: n === null ? null : String(v) }, n === null || !Number.isFinite(n) ? String(v) : formats[i].format(n));
  };
  const table = h(
    'table',
    { class: 'data' },
    caption ? h('caption', {}, caption) : null,
    h('thead', {}, h('tr', {}, columns.map((c, i) => h('th', { scope: 'col', class: numeric[i] ? 'num' : null }, String(c))))),
    h('tbody', {}, shown.map((row) => h('tr', {}, row.map(cell)))),
  );
  return h(
    'div',
    { class: 'table-wrap', role: 'region', 'aria-label': label || caption || 'Table', tabindex: '0' },
    table,
    rows.length > shown.length ? h('p', { class: 'muted' }, `Showing ${shown.length} of ${rows.length} rows.`) : null,
  );
}

// ----- the job detail ---------------------------------------------------------------------------

const SLOTS = ['header', 'failure', 'actions', 'waiting', 'answer', 'citations', 'graph', 'steps', 'timeline', 'results', 'usage', 'cost', 'fork', 'log'];

function section(title, id, ...children) {
  return h('section', { class: 'card', 'aria-labelledby': id }, h('h3', { id }, title), children);
}

/** Replace a slot's content only when its data changed, so open <details> and focus survive polling. */
function renderSlot(d, name, data, render) {
  const key = JSON.stringify(data === undefined ? null : data);
  if (d.memo.get(name) === key) return;
  d.memo.set(name, key);
  const slot = d.slots[name];
  const content = data === null || data === undefined ? null : render(data);
  slot.replaceChildren(...(content ? [content] : []));
  slot.hidden = !content;
}

function buildDetail(d) {
  const root = $('#detail');
  d.slots = {};
  const nodes = SLOTS.map((name) => {
    const slot = h('div', { class: `slot slot-${name}`, dataset: { slot: name }, hidden: true });
    d.slots[name] = slot;
    return slot;
  });
  d.liveStatus = h('p', { class: 'visually-hidden', role: 'status', 'aria-live': 'polite' });
  d.connection = h('div', { class: 'alert', role: 'alert', hidden: true });
  // Calm, not an alert: the job cannot be read until a key is entered (nothing the user did failed).
  d.locked = h('p', { class: 'card calm', id: 'detail-locked', role: 'status', hidden: true });
  // Errors of the user's own actions (answer, cancel) stay until dismissed: the job may move on at once.
  d.notice = h('div', { class: 'alert notice', id: 'action-error', role: 'alert', hidden: true });
  root.replaceChildren(d.liveStatus, d.connection, d.locked, ...nodes);
  d.slots.actions.after(d.notice);
  root.hidden = false;
  $('#detail-empty').hidden = true;
  document.body.classList.add('has-job');
  // The log grows by appending: its section is built once.
  d.logList = h('ol', { class: 'log', id: 'log-entries' });
  d.liveList = h('ul', { class: 'log live', 'aria-label': 'Live' });
  d.logInfo = h('p', { class: 'muted' });
  d.slots.log.append(
    h(
      'details',
      { class: 'card log-card', open: true },
      h('summary', {}, h('h3', { id: 'log-title' }, 'Log')),
      d.logInfo,
      d.logList,
      d.liveList,
    ),
  );
  d.slots.log.hidden = false;
}

function showNotice(d, err, opts) {
  const dismiss = h('button', { type: 'button', class: 'quiet small', on: { click: () => clearAlert(d.notice) } }, 'Dismiss');
  d.notice.replaceChildren(errorBox(err, opts), dismiss);
  d.notice.hidden = false;
}

/** The question, clamped to three lines with "Show more" when it is longer (the choice survives polling). */
function clampedQuestion(d, text) {
  const title = h('h2', { id: 'detail-heading', tabindex: '-1', class: d.questionOpen ? 'question' : 'question clamped' }, text);
  const more = h('button', { type: 'button', class: 'quiet small', id: 'question-more', 'aria-controls': 'detail-heading', 'aria-expanded': String(Boolean(d.questionOpen)), hidden: true }, d.questionOpen ? 'Show less' : 'Show more');
  more.addEventListener('click', () => {
    d.questionOpen = !d.questionOpen;
    title.classList.toggle('clamped', !d.questionOpen);
    more.textContent = d.questionOpen ? 'Show less' : 'Show more';
    more.setAttribute('aria-expanded', String(d.questionOpen));
  });
  // Whether it overflows is known once laid out (and changes with the width); a short question gets no button.
  const measure = () => {
    more.hidden = !d.questionOpen && title.scrollHeight <= title.clientHeight + 1;
  };
  requestAnimationFrame(measure);
  if (typeof ResizeObserver === 'function') new ResizeObserver(measure).observe(title);
  return h('div', { class: 'question-box' }, title, more);
}

function offlineLabel(model) {
  if (model !== OFFLINE_MODEL) return null;
  return h('span', { class: 'offline-note', title: OFFLINE_NOTE }, 'keyword-matching stand-in, not an LLM');
}

/** A run's title: what it runs and with which inputs ("workflow returns-brief v1 · region=North, old=80"). */
function runTitle(v) {
  const run = v.run;
  if (!run) return v.question || 'Job';
  const inputs = Object.entries(run.inputs || {}).map(([k, val]) => `${k}=${typeof val === 'string' ? val : JSON.stringify(val)}`);
  return `${run.kind} ${run.id}${run.version ? ` v${run.version}` : ''}${inputs.length ? ` · ${inputs.join(', ')}` : ''}`;
}

function renderHeader(d, v) {
  return h(
    'div',
    { class: 'card job-head' },
    h('div', { class: 'job-title-row' }, clampedQuestion(d, runTitle(v)), h('span', { id: 'job-status' }, badge(v.status))),
    h(
      'dl',
      { class: 'meta' },
      h('div', {}, h('dt', {}, 'Job'), h('dd', {}, h('code', {}, v.id))),
      h('div', {}, h('dt', {}, 'Created'), h('dd', {}, timeEl(v.created_at))),
      h('div', {}, h('dt', {}, 'Updated'), h('dd', { id: 'job-updated' }, timeEl(v.updated_at))),
      h('div', {}, h('dt', {}, 'Took'), h('dd', { id: 'job-took' }, tookText(v))),
      h('div', {}, h('dt', {}, 'Tokens'), h('dd', { id: 'job-tokens' }, tokensText(v))),
      h(
        'div',
        {},
        h('dt', {}, 'Cost'),
        h(
          'dd',
          {},
          h('span', { id: 'job-cost' }, costText(v)),
          ' ',
          h('button', { type: 'button', class: 'quiet small', id: 'cost-more', 'aria-controls': 'cost-breakdown', on: { click: () => openCostBreakdown(d) } }, 'Breakdown'),
        ),
      ),
      v.mode && v.mode !== 'deterministic' ? h('div', {}, h('dt', {}, 'Mode'), h('dd', {}, v.mode)) : null,
      h('div', {}, h('dt', {}, 'Updates'), h('dd', { id: 'job-updates' }, updatesText(d, v))),
    ),
  );
}

/**
 * From the job's start to its end (or to now while it runs). The status times may be whole seconds: the end is
 * the latest time the view knows (its update, a step's end, the last log line read).
 */
function tookText(v) {
  const start = parseTime(v.created_at);
  if (!start) return '—';
  if (!v.finished) return `${fmtSpan(Date.now() - start)} so far`;
  const times = [v.updated_at, ...v.steps.map((s) => s.ended_at), ...((v.log && v.log.entries) || []).map((e) => e.time)];
  const d = state.detail;
  if (d && d.lastLogTime) times.push(d.lastLogTime);
  const ends = times.map(parseTime).filter(Boolean).map((t) => t.getTime());
  return ends.length ? fmtSpan(Math.max(...ends) - start) : '—';
}

function tokensText(v) {
  const total = v.usage && v.usage.total;
  if (!total) return '—';
  return `${fmtNumber(total.total_tokens)} (${fmtNumber(total.tokens_input)} in, ${fmtNumber(total.tokens_output)} out)`;
}

/**
 * The job's cost from its ledger (the view's `cost`): the priced total with its currency, and the meters with no
 * price counted apart ("+ price unknown for 2 meters"), never as 0. While the job runs: "so far".
 */
function costText(v) {
  const cost = v.cost;
  if (!cost) return '—';
  if (cost.total == null) return `not known: ${cost.error || 'no ledger'}`;
  const unknown = (cost.unknown || []).length;
  const priced = (cost.by_meter || []).some((m) => m.cost != null && m.included_in == null);
  const parts = [];
  if (priced || !unknown) parts.push(fmtMoney(cost.total, cost.currency));
  if (unknown) parts.push(`${priced ? '+ ' : ''}price unknown for ${plural(unknown, 'meter')}`);
  return `${parts.join(' ')}${v.finished ? '' : ' so far'}`;
}

function openCostBreakdown(d) {
  d.costOpen = true;
  const box = document.getElementById('cost-breakdown');
  if (!box) return;
  box.open = true;
  box.scrollIntoView({ block: 'nearest' });
  box.querySelector('summary').focus();
}

/** What one meter cost: its amount, "included in …" (it runs inside another meter), or "price unknown" (never 0). */
function meterCost(m, currency) {
  if (m.included_in) return `included in ${m.included_in}`;
  if (m.cost == null) return m.quantity > 0 ? 'price unknown' : '—';
  return fmtMoney(m.cost, currency);
}

/** What the ledger tells of a meter besides its quantity (input and output tokens, rows read, bytes stored). */
function meterDetail(detail) {
  const entries = Object.entries(detail || {});
  if (!entries.length) return null;
  return h('div', { class: 'muted small meter-detail' }, entries.map(([k, val]) => `${k.replaceAll('_', ' ')} ${fmtQuantity(val)}`).join(', '));
}

/** The ledger on demand: by meter, by step, and the meters with no price with their quantities. */
function renderCost(d, data) {
  const { cost, status } = data;
  if (!cost || cost.total == null) return null;
  const currency = cost.currency;
  const head = (cols) => h('thead', {}, h('tr', {}, cols.map((t, i) => h('th', { scope: 'col', class: i ? 'num' : null }, t))));
  const meters = h(
    'table',
    { class: 'usage cost-meters', id: 'cost-by-meter' },
    h('caption', {}, 'By meter'),
    head(['Meter', 'Quantity', 'Unit', 'Unit price', 'Cost']),
    h(
      'tbody',
      {},
      (cost.by_meter || []).map((m) =>
        h(
          'tr',
          { dataset: { meter: m.meter } },
          h('th', { scope: 'row' }, h('code', {}, m.meter), meterDetail(m.detail)),
          h('td', { class: 'num' }, fmtQuantity(m.quantity)),
          h('td', { class: 'num' }, m.unit),
          h('td', { class: 'num', title: m.price_key ? `price key ${m.price_key}` : null }, m.unit_price != null ? fmtMoney(m.unit_price, currency) : m.included_in ? '' : m.cost != null ? 'from settings' : 'unknown'),
          h('td', { class: m.cost == null && !m.included_in ? 'num unknown-price' : 'num' }, meterCost(m, currency)),
        ),
      ),
    ),
    h('tfoot', {}, h('tr', { class: 'total' }, h('th', { scope: 'row', colspan: '4' }, 'Priced total'), h('td', { class: 'num' }, fmtMoney(cost.total, currency)))),
  );
  const steps = h(
    'table',
    { class: 'usage cost-steps', id: 'cost-by-step' },
    h('caption', {}, 'By step'),
    head(['Step', 'Cost', 'Price unknown for']),
    h(
      'tbody',
      {},
      (cost.by_step || []).map((s) =>
        h(
          'tr',
          { dataset: { step: s.step_id } },
          h('th', { scope: 'row' }, s.step_id),
          h('td', { class: 'num' }, fmtMoney(s.cost, currency)),
          h('td', { class: 'num' }, (s.unknown || []).join(', ')),
        ),
      ),
    ),
  );
  const unknown = cost.unknown || [];
  const unknownList = unknown.length
    ? h(
        'div',
        { class: 'cost-unknown' },
        h('h4', {}, 'Price unknown (not in the total)'),
        h(
          'ul',
          { id: 'cost-unknown' },
          unknown.map((u) => h('li', { dataset: { meter: u.meter } }, h('code', {}, u.meter), ` ${fmtQuantity(u.quantity)} ${u.unit}`, u.price_key ? h('span', { class: 'muted' }, ` (price key ${u.price_key})`) : null)),
        ),
      )
    : null;
  const table = cost.price_table || {};
  const box = h(
    'details',
    { class: 'card cost-card', id: 'cost-breakdown', open: Boolean(d.costOpen) },
    h('summary', {}, h('h3', { id: 'cost-title' }, `Cost: ${costText({ cost, status })}`)),
    h('p', { class: 'muted' }, `Priced for ${cost.backend} on ${cost.hosting}, prices ${table.version || '?'} (${table.date || '?'}).`),
    unknownList,
    h('div', { class: 'table-wrap', role: 'region', 'aria-label': 'Cost by meter', tabindex: '0' }, meters),
    h('div', { class: 'table-wrap', role: 'region', 'aria-label': 'Cost by step', tabindex: '0' }, steps),
  );
  box.addEventListener('toggle', () => {
    d.costOpen = box.open;
  });
  return box;
}

function updatesText(d, v) {
  if (v.finished) return 'final';
  return d.streaming ? 'live, as they happen (event stream)' : 'live, every second';
}

/** The header's changing parts, set in place: a stream brings many views, and the question must not flicker. */
function updateHeader(d, v) {
  const updated = document.getElementById('job-updated');
  if (updated && updated.dataset.value !== String(v.updated_at)) {
    updated.dataset.value = String(v.updated_at);
    updated.replaceChildren(timeEl(v.updated_at));
  }
  const updates = document.getElementById('job-updates');
  if (updates) updates.textContent = updatesText(d, v);
  const more = document.getElementById('cost-more');
  if (more) more.hidden = !v.cost || v.cost.total == null;
  for (const [id, text] of [['job-took', tookText(v)], ['job-tokens', tokensText(v)], ['job-cost', costText(v)]]) {
    const el = document.getElementById(id);
    if (el && el.textContent !== text) el.textContent = text;
  }
}

function renderActions(d, terminal, failed) {
  if (failed) return renderRunAgain(d);
  if (terminal) return null;
  const confirmRow = h(
    'div',
    { class: 'confirm', hidden: true },
    h('span', {}, 'Cancel this job? Finished steps stay in the view.'),
    h('button', { type: 'button', class: 'danger', id: 'confirm-cancel', on: { click: () => cancelJob(d, confirmRow) } }, 'Yes, cancel the job'),
    h('button', { type: 'button', class: 'quiet', on: { click: () => { confirmRow.hidden = true; start.hidden = false; start.focus(); } } }, 'Keep it running'),
  );
  const start = h(
    'button',
    {
      type: 'button',
      class: 'danger-outline',
      id: 'cancel-job',
      on: {
        click: () => {
          start.hidden = true;
          confirmRow.hidden = false;
          confirmRow.querySelector('button').focus();
        },
      },
    },
    'Cancel job',
  );
  return h('div', { class: 'job-actions' }, start, confirmRow);
}

/** A failed job starts again as a new job: the same question (or run and inputs), other limits or another model. */
function renderRunAgain(d) {
  const v = d.view;
  const request = v.request || {};
  const constraints = request.constraints || {};
  const budget = constraints.budget || {};
  const used = v.usage && v.usage.total ? v.usage.total.total_tokens : 0;
  // The suggestion: room for a few more model calls of the job's own size (max tokens per step) on top of what it
  // had, and never less than twice that, so a budget stop does not repeat at once. No limit stays no limit.
  const perCall = constraints.max_tokens || 0;
  const had = budget.max_total_tokens || null;
  const suggested = had ? Math.max(had * 2, used * 2, had + 8 * perCall) : '';
  const budgetInput = h('input', { id: 'again-budget', type: 'number', min: '1', step: '1', inputmode: 'numeric', value: String(suggested), placeholder: 'No limit' });
  const stepInput = h('input', { id: 'again-max-tokens', type: 'number', min: '1', max: '128000', step: '1', inputmode: 'numeric', value: constraints.max_tokens ? String(constraints.max_tokens) : '' });
  const modelList = h('datalist', { id: 'again-models' });
  const modelInput = h('input', { id: 'again-model', type: 'text', autocomplete: 'off', list: 'again-models', value: (constraints.allowed_models || []).join(', '), placeholder: 'As before' });
  const alertEl = h('div', { class: 'alert', role: 'alert', hidden: true });
  const status = h('p', { class: 'muted', role: 'status' });
  const button = h('button', { type: 'submit', class: 'primary', id: 'run-again' }, 'Run again');
  const form = h(
    'form',
    { class: 'run-again', id: 'run-again-form', novalidate: true },
    h('div', { class: 'field-row' },
      h('div', { class: 'field' }, h('label', { for: 'again-budget' }, 'Token budget'), budgetInput, h('span', { class: 'muted small', id: 'again-budget-was' }, `had ${had ? fmtNumber(had) : 'no limit'}, used ${fmtNumber(used || 0)}`)),
      h('div', { class: 'field' }, h('label', { for: 'again-max-tokens' }, 'Max tokens per step'), stepInput),
      h('div', { class: 'field' }, h('label', { for: 'again-model' }, 'Models (comma-separated)'), modelInput, modelList)),
    alertEl,
    h('div', { class: 'actions' }, button),
    status,
  );
  api('/api/llm/models').then((listed) => {
    const ids = (listed.providers || []).flatMap((p) => (p.models || []).map((m) => m.id));
    modelList.replaceChildren(...ids.map((id) => h('option', { value: id })));
  }, () => {});
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearAlert(alertEl);
    const number = (input) => (input.value.trim() === '' ? null : Number(input.value));
    const models = modelInput.value.split(/[\s,]+/).filter(Boolean);
    const next = { ...constraints, budget: { ...budget, max_total_tokens: number(budgetInput) } };
    if (number(stepInput) !== null) next.max_tokens = number(stepInput);
    else delete next.max_tokens;
    next.allowed_models = models;
    const common = { constraints: next, approval: request.approval, wait: request.wait };
    const run = v.run;
    const [path, body] = run
      ? [`/api/${run.kind}s/${encodeURIComponent(run.id)}/runs`, { ...common, inputs: run.inputs || {}, version: run.version }]
      : [API, { ...common, question: v.question, mode: v.mode, tools: request.tools, agent: request.agent }];
    button.disabled = true;
    status.textContent = 'Starting…';
    try {
      const started = await api(path, { method: 'POST', body });
      status.textContent = `Started job ${started.id}.`;
      loadJobs({ reset: true });
      location.hash = `job=${encodeURIComponent(started.id)}`;
    } catch (err) {
      status.textContent = '';
      handleAuth(err);
      showAlert(alertEl, err, { title: 'The job was not started again:' });
      button.disabled = false;
    }
  });
  return h(
    'details',
    { class: 'card run-again-card', id: 'run-again-card' },
    h('summary', {}, h('h3', {}, 'Run again'), h('span', { class: 'muted small' }, ' the same question as a new job, with a larger budget or another model')),
    form,
  );
}

async function cancelJob(d, confirmRow) {
  const buttons = confirmRow.querySelectorAll('button');
  buttons.forEach((b) => { b.disabled = true; });
  clearAlert(d.notice);
  try {
    await api(jobUrl(d.id, '/cancel'), { method: 'POST' });
    confirmRow.replaceChildren(h('span', { role: 'status' }, 'Cancelling…'));
  } catch (err) {
    handleAuth(err);
    showNotice(d, err, { title: 'The job was not cancelled:' });
    buttons.forEach((b) => { b.disabled = false; });
  }
  pollNow(d);
}

function failedStep(v) {
  const err = v.error;
  if (!err) return null;
  return v.steps.find((s) => s.id === err.step_id) || null;
}

function renderFailure(v) {
  const step = failedStep(v);
  return h(
    'section',
    { class: 'card failure', 'aria-labelledby': 'failure-title', role: 'alert' },
    h('h3', { id: 'failure-title' }, step ? `Failed at step ${step.id}: ${step.title}` : 'The job failed'),
    step ? h('p', { class: 'muted' }, `Step kind: ${step.kind}`) : null,
    errorBox(v.error),
  );
}

function editorRows(text, min = 3, max = 16) {
  return String(Math.min(max, Math.max(min, String(text).split('\n').length + 1)));
}

/** The editable fields of a step input as labelled inputs (only the kind's own fields; no internal flags). */
function fieldEditors(kind, input, given = null) {
  const fields = given || editFieldsOf(kind) || Object.keys(input).filter((k) => typeof input[k] === 'string').map((name) => ({ name, label: `Step ${name}`, kind: 'text' }));
  return fields.map((f) => {
    const id = `edit-${f.name}`;
    const value = input[f.name] === null || input[f.name] === undefined ? '' : f.kind === 'sql' ? formatSql(input[f.name]) : String(input[f.name]);
    let el;
    if (f.kind === 'int') el = h('input', { id, type: 'number', min: '1', step: '1', inputmode: 'numeric', value });
    else if (f.kind === 'line') el = h('input', { id, type: 'text', autocomplete: 'off', value });
    else el = h('textarea', { id, class: f.kind === 'sql' ? 'code' : null, rows: editorRows(value, f.kind === 'sql' ? 4 : 2), spellcheck: f.kind === 'sql' ? 'false' : null, value });
    const hintId = f.hint ? `${id}-hint` : null;
    if (hintId) el.setAttribute('aria-describedby', hintId);
    return {
      field: f,
      el,
      original: value,
      node: h('div', { class: 'field edit-field' }, h('label', { for: id }, f.label), el, f.hint ? h('span', { class: 'muted small', id: hintId }, f.hint) : null),
    };
  });
}

/** The edit answer: only the fields the user changed; a cleared optional field is null (e.g. SQL to write again). */
function editedFields(editors) {
  const changed = {};
  for (const { field, el, original } of editors) {
    const raw = el.value;
    if (raw === original) continue;
    const value = raw.trim();
    if (field.kind === 'int') changed[field.name] = value === '' ? null : Number(value);
    else if (value === '' && !field.required) changed[field.name] = null;
    else changed[field.name] = value;
  }
  return changed;
}

/** The option a failed step's user should try first: retry only when a retry can succeed, else edit. */
function primaryOption(w) {
  if (w.kind !== 'error') return w.options.find((o) => o !== 'abort') || null;
  const code = w.details && w.details.error ? w.details.error.code : null;
  if (isRetryable(code) && w.options.includes('retry')) return 'retry';
  if (w.options.includes('edit')) return 'edit';
  return w.options.find((o) => o !== 'retry' && o !== 'abort') || null;
}

function renderWaiting(d, w) {
  const status = h('div', { class: 'answer-status', role: 'status' });
  const alertEl = h('div', { class: 'alert', role: 'alert', hidden: true });
  const details = w.details || {};
  // The view says what kind of question this is (api/view.py waiting_view): it is drawn as that, never guessed.
  const form = w.form;
  // The buttons' text: the catalog's labels of this form's answers (a choice or a text question: its options as they are).
  const labels = labelsFor(`answer.${form}`);
  const body = [];
  let editor = null;
  let editors = [];
  if (typeof details.refused_edit === 'string') {
    // The job asks again because the last edit could not be applied: say why, in words.
    body.push(h('div', { class: 'alert inline', id: 'refused-edit' }, errorBox({ code: 'EDIT_REFUSED', message: details.refused_edit }, { title: 'Your last edit was not applied:' })));
  }
  if (form === 'code') {
    editor = h('textarea', { id: 'waiting-code', class: 'code', rows: editorRows(details.code, 6), spellcheck: 'false', value: details.code });
    const files = Array.isArray(details.files) ? details.files.map((f) => `${f.name} (${fmtNumber(f.size)} bytes)`) : [];
    body.push(h('label', { for: 'waiting-code' }, 'Python to run (edit it, then choose “Run edited code”)'), editor, files.length ? h('p', { class: 'muted' }, 'Files it writes: ', files.join(', ')) : null);
  } else if (form === 'sql') {
    const sensitive = details.sensitive_tables || [];
    if (sensitive.length) {
      body.push(h('p', { class: 'warning' }, 'This query reads tables marked sensitive: ', sensitive.join(', ')));
    }
    const sql = formatSql(details.sql || '');
    editor = h('textarea', { id: 'waiting-sql', class: 'code', rows: editorRows(sql, 4), spellcheck: 'false', value: sql });
    body.push(
      h('label', { for: 'waiting-sql' }, 'SQL to run (edit it, then choose “Run edited SQL”)'),
      editor,
      details.tables && details.tables.length ? h('p', { class: 'muted' }, 'Tables: ', details.tables.join(', ')) : null,
    );
  } else if (form === 'step_error') {
    if (details.error) body.push(h('div', { class: 'alert inline' }, errorBox(details.error, { title: 'Step error:' })));
    if (typeof details.sql === 'string' && details.sql) {
      // The statement that was rejected or failed: without it "retry" and "edit" are blind.
      body.push(h('p', { class: 'muted' }, 'The SQL that failed:'), h('pre', { class: 'code', id: 'failed-sql' }, formatSql(details.sql)));
    }
    const step = d.view ? d.view.steps.find((s) => s.id === w.step_id) : null;
    // The asking step's own kind (a sub-workflow's step is not among the run's steps).
    const kind = w.step_kind || (step ? step.kind : null);
    if (w.options.includes('edit') && kind && details.input && typeof details.input === 'object') {
      editors = fieldEditors(kind, details.input);
      if (editors.length) {
        body.push(h('fieldset', { class: 'edit-fields' }, h('legend', {}, 'Step input (change a field, then choose “Retry with edited input”)'), editors.map((e) => e.node)));
      }
    }
  } else {
    // Other details as labelled text; structured values (internal data) are not shown.
    const shown = Object.entries(details).filter(([k, v]) => k !== 'refused_edit' && ['string', 'number'].includes(typeof v));
    if (shown.length) body.push(h('dl', { class: 'meta waiting-details' }, shown.map(([k, v]) => h('div', {}, h('dt', {}, k.replace(/_/g, ' ')), h('dd', {}, String(v))))));
    // What the person decides on: the results of the steps before (shown in full under "Step results").
    if (d.view && d.view.steps.some((s) => s.output && s.id !== w.step_id)) {
      // A button, not a #fragment link: the address names the job (#job=<id>).
      const toResults = () => {
        const results = document.getElementById('results-title');
        if (results) results.scrollIntoView({ block: 'start' });
      };
      body.push(h('p', { class: 'muted' }, h('button', { type: 'button', class: 'link-button to-results', on: { click: toResults } }, 'See the step results'), ' (rows, passages, figures) before you answer.'));
    }
  }
  let textBox = null;
  if (w.free_text) {
    textBox = h('input', { id: 'waiting-text', type: 'text', autocomplete: 'off' });
    body.push(h('label', { for: 'waiting-text' }, 'Your answer'), textBox);
  }
  const buttons = [];
  const send = async (answer, button) => {
    clearAlert(alertEl);
    clearAlert(d.notice);
    status.textContent = 'Sending…';
    buttons.forEach((b) => { b.disabled = true; });
    try {
      await api(jobUrl(d.id, '/feedback'), { method: 'POST', body: { answer, question_id: w.question_id } });
      status.textContent = `Answer “${button.textContent}” sent; the job continues.`;
    } catch (err) {
      status.textContent = '';
      handleAuth(err);
      showNotice(d, err, { title: 'The answer was not accepted:' });
      buttons.forEach((b) => { b.disabled = false; });
    }
    pollNow(d);
  };
  // Abort ends the job: it asks first, in the page (as Cancel does).
  const confirmRow = h(
    'div',
    { class: 'confirm', hidden: true },
    h('span', {}, 'Abort this job? It stops here; finished steps stay in the view.'),
    h('button', { type: 'button', class: 'danger', id: 'confirm-abort' }, 'Yes, abort the job'),
    h('button', { type: 'button', class: 'quiet', id: 'keep-waiting' }, 'Keep the question open'),
  );
  const [yes, no] = confirmRow.querySelectorAll('button');
  const choose = (option, button) => {
    if (option === 'abort') {
      confirmRow.hidden = false;
      yes.focus();
      return undefined;
    }
    if (option !== 'edit') return send(option, button);
    if (form === 'sql' || form === 'code') {
      const sql = editor.value.trim();
      if (!sql) {
        showAlert(alertEl, { code: 'INVALID_ANSWER', message: form === 'code' ? 'Enter the code to run.' : 'Enter the SQL to run.' });
        editor.focus();
        return undefined;
      }
      return send(form === 'code' ? { action: 'edit', code: sql } : { action: 'edit', sql }, button);
    }
    if (editors.length) {
      const changed = editedFields(editors);
      if (!Object.keys(changed).length) {
        showAlert(alertEl, { code: 'NOTHING_CHANGED', message: 'Change a field of the step input first.' });
        editors[0].el.focus();
        return undefined;
      }
      return send({ action: 'edit', ...changed }, button);
    }
    showAlert(alertEl, { code: 'INVALID_ANSWER', message: 'This step has no input that can be edited here.' });
    return undefined;
  };
  const primary = textBox ? null : primaryOption(w);
  // The primary action comes first; Abort always last.
  const ordered = [...w.options].sort((a, b) => (b === primary) - (a === primary) || (a === 'abort') - (b === 'abort'));
  for (const option of ordered) {
    const cls = option === 'abort' ? 'danger-outline' : option === primary ? 'primary' : '';
    const button = h('button', { type: 'button', class: cls, dataset: { option } }, labels[option] || option);
    button.addEventListener('click', () => choose(option, button));
    buttons.push(button);
  }
  yes.addEventListener('click', () => {
    confirmRow.hidden = true;
    send('abort', buttons.find((b) => b.dataset.option === 'abort'));
  });
  no.addEventListener('click', () => {
    confirmRow.hidden = true;
    const abort = buttons.find((b) => b.dataset.option === 'abort');
    if (abort) abort.focus();
  });
  if (textBox) {
    const button = h('button', { type: 'button', class: 'primary', dataset: { option: 'free_text' } }, 'Send answer');
    button.addEventListener('click', () => {
      const text = textBox.value.trim();
      if (!text) {
        showAlert(alertEl, { code: 'INVALID_ANSWER', message: 'Type an answer first.' });
        textBox.focus();
        return;
      }
      send(text, button);
    });
    textBox.addEventListener('keydown', (event) => {
      if (event.key === 'Enter') button.click();
    });
    buttons.unshift(button);
  }
  return h(
    'section',
    { class: `card waiting waiting-${form}`, 'aria-labelledby': 'waiting-title', id: 'waiting', dataset: { form } },
    h('h3', { id: 'waiting-title' }, WAITING_TITLES[form] || 'A question for you'),
    h('p', { class: 'waiting-question' }, w.question),
    deadline(w),
    h('p', { class: 'muted' }, `Question ${w.question_id}`, w.step_id ? ` · step ${w.step_id}` : '', Array.isArray(w.asked_in) ? ` · asked in ${w.asked_in.join(' › ')}` : ''),
    body,
    alertEl,
    h('div', { class: 'actions' }, buttons),
    confirmRow,
    status,
  );
}

/** When the question expires: the time with its zone and how long is left (kept current while it shows). */
function deadline(w) {
  const expires = parseTime(w.expires_at);
  if (!expires) return null;
  const left = h('span', { class: 'deadline-left' });
  const tick = () => {
    const ms = expires.getTime() - Date.now();
    left.textContent = ms > 0 ? ` (in ${fmtSpan(ms)})` : ' (expired)';
    if (!left.isConnected && left.dataset.shown) clearInterval(timer);
    left.dataset.shown = '1';
  };
  const timer = setInterval(tick, 30000);
  tick();
  // What happens then, when the view says (waiting.expiry_default: the answer taken, or null: the job fails).
  let then = null;
  if (Object.prototype.hasOwnProperty.call(w, 'expiry_default')) {
    then = typeof w.expiry_default === 'string'
      ? h('span', { class: 'deadline-then muted', id: 'waiting-expiry' }, ` If no one answers by then, the job goes on with “${w.expiry_default}”.`)
      : h('span', { class: 'deadline-then muted', id: 'waiting-expiry' }, ' If no one answers by then, the job fails (WAIT_EXPIRED).');
  }
  return h('p', { class: 'deadline', id: 'waiting-deadline' }, 'Answer by ', timeEl(w.expires_at), left, then);
}

/**
 * The answer's citations. A run's answer is one of its nodes' outputs (an agent's text), and its citations are that
 * node's: they are taken from the step whose answer is the run's answer, word for word, when the run has none.
 */
function answerCitations(v) {
  const own = v.answer.citations || [];
  if (own.length || !v.run) return own;
  const source = v.steps.find((s) => s.output && s.output.answer === v.answer.text && Array.isArray(s.output.citations));
  return source ? source.output.citations : [];
}

function liveAnswer(v) {
  const step = v.steps.find((s) => s.partial_output && s.state === 'running');
  if (!step) return null;
  return { text: step.partial_output.text, chars: step.partial_output.chars, step: step.id };
}

function renderAnswer(data) {
  if (data.live) {
    return section(
      'Answer (being written)',
      'answer-title',
      h('p', { class: 'muted', role: 'status' }, `${data.live.chars} characters so far…`),
      h('div', { class: 'answer-text streaming', id: 'partial-answer' }, data.live.text),
    );
  }
  const model = data.model;
  return section(
    'Answer',
    'answer-title',
    model === OFFLINE_MODEL
      ? h('p', { class: 'answer-model offline', id: 'answer-model' }, 'Written by the offline model: ', h('strong', {}, 'a deterministic, keyword-matching stand-in, not an LLM'), '. It matches words of the question to the data and the documents.')
      : model
        ? h('p', { class: 'answer-model muted', id: 'answer-model' }, 'Written by ', h('code', {}, model), '.')
        : null,
    data.answer.unsupported
      ? h('p', { class: 'warning', id: 'answer-unsupported', role: 'note' }, 'This answer has no support: ', data.answer.unsupported, '. Do not take it as found.')
      : null,
    h('div', { id: 'final-answer' }, renderAnswerText(data.answer.text, data.answer.citations)),
    renderClaims(data.answer),
    answerFiles(data.files || []),
  );
}

// ----- checked claims ---------------------------------------------------------------------------

const CLAIM_LABELS = { verified: 'Verified', unsupported: 'Unsupported', not_checkable: 'Not checkable' };

/** Where a piece of evidence points, in a few words: "sql:sales row 0, return_count" or "policy.md#2, characters 10–64". */
function evidenceLabel(e) {
  if (e.row !== null && e.row !== undefined) return `${e.source_id} row ${e.row}${e.column ? `, ${e.column}` : ''}`;
  if (e.start !== null && e.start !== undefined) return `${e.source_id}, characters ${e.start}–${e.end ?? 'end'}`;
  return `${e.source_id} (all of it)`;
}

/**
 * The answer's claims as the server's checker judged them (never re-judged here): the summary ("verified 5 of 6"),
 * each claim with its verdict, the reason when it is not verified, and a button that shows its evidence.
 */
function renderClaims(answer) {
  const claims = answer.claims || [];
  if (!claims.length) {
    // No claims: the server's summary says nothing in the answer is checked; the page says so too.
    const said = answer.claims_summary && answer.claims_summary.text;
    return said ? h('div', { class: 'claims', id: 'claims' }, h('h4', { id: 'claims-summary', class: 'claim-unchecked' }, `Claims: ${said}`)) : null;
  }
  const summary = (answer.claims_summary && answer.claims_summary.text) || `${claims.length} claims`;
  return h(
    'div',
    { class: 'claims', id: 'claims' },
    h('h4', { id: 'claims-summary' }, `Claims: ${summary}`),
    h('ol', { class: 'claim-list' }, claims.map((c, i) => {
      const status = (c.check && c.check.status) || 'unsupported';
      const evidence = c.evidence || [];
      return h(
        'li',
        { class: `claim claim-${status}`, dataset: { claim: String(i), status } },
        h('span', { class: `badge claim-badge claim-badge-${status}` }, CLAIM_LABELS[status] || status),
        ' ',
        h('span', { class: 'claim-text' }, c.text),
        status !== 'verified' && c.check && evidence.length ? h('p', { class: 'claim-reason muted' }, c.check.reason) : null,
        evidence.length
          ? h('button', { type: 'button', class: 'quiet small claim-evidence', title: evidence.map(evidenceLabel).join('; '), on: { click: () => showEvidence(evidence) } }, `Show the evidence (${evidence.map(evidenceLabel).join('; ')})`)
          : h('p', { class: 'claim-reason' }, 'No evidence cited.'),
      );
    })),
  );
}

/** Highlight a claim's evidence in the step results: the cells in their table, the span in its passage. */
function showEvidence(evidence) {
  const results = document.querySelector('#detail .slot-results');
  if (!results) return;
  results.querySelectorAll('.evidence-cell').forEach((el) => el.classList.remove('evidence-cell'));
  results.querySelectorAll('mark.evidence-span').forEach((mark) => {
    const p = mark.parentElement;
    p.textContent = p.textContent; // back to one text node
  });
  let first = null;
  for (const e of evidence) {
    const target = [...results.querySelectorAll('[data-source-id]')].find((el) => el.dataset.sourceId === e.source_id);
    if (!target) continue;
    if (target.tagName === 'DETAILS') target.open = true;
    const table = target.querySelector('table.data');
    if (table && e.row !== null && e.row !== undefined) {
      const col = [...table.querySelectorAll('thead th')].findIndex((th) => th.textContent === e.column);
      const row = table.querySelectorAll('tbody tr')[e.row];
      const td = row && col >= 0 ? row.children[col] : null;
      if (td) {
        td.classList.add('evidence-cell');
        first = first || td;
      }
      continue;
    }
    const p = target.querySelector('.chunk-content');
    if (p) {
      const text = p.textContent;
      const start = e.start ?? 0;
      const end = e.end ?? text.length;
      const mark = h('mark', { class: 'evidence-span' }, text.slice(start, end));
      p.replaceChildren(text.slice(0, start), mark, text.slice(end));
      first = first || mark;
    }
  }
  if (first) first.scrollIntoView({ block: 'center' });
}

/** The charts and files the job's code wrote, under the answer they belong to, each leading to its step. */
function answerFiles(files) {
  if (!files.length) return null;
  return h(
    'div',
    { class: 'answer-files', id: 'answer-files' },
    h('h4', {}, `Charts and files (${files.length})`),
    h('ul', { class: 'artifacts' }, files.map((a) => {
      const item = artifactItem(a);
      item.append(' ', h('button', { type: 'button', class: 'quiet small', on: { click: () => openArtifact(a.ref) } }, `from step ${a.step.id}`));
      return item;
    })),
  );
}

/** Scroll to the cited source among the step results and open it (a document passage or a query with its rows). */
function openSource(sourceId) {
  const target = [...document.querySelectorAll('#detail .slot-results [data-source-id]')].find((el) => el.dataset.sourceId === sourceId);
  if (!target) return false;
  if (target.tagName === 'DETAILS') target.open = true;
  target.scrollIntoView({ block: 'center' });
  target.focus({ preventScroll: true });
  target.classList.remove('flash');
  // Restart the highlight on a second click.
  void target.offsetWidth;
  target.classList.add('flash');
  return true;
}

function citationItem(c) {
  const isSql = c.kind === 'sql';
  // The query itself is shown once, with its rows, in the step results; the citation leads there. Only when
  // the results do not hold the source (an older job) does the citation show its own excerpt.
  let fallback = null;
  const open = h(
    'button',
    { type: 'button', class: 'quiet small cite-open', dataset: { sourceId: c.source_id } },
    isSql ? 'Show the query and its rows' : 'Show the passage',
  );
  open.addEventListener('click', () => {
    if (openSource(c.source_id) || fallback || !isSql || !c.quote) return;
    fallback = h('pre', { class: 'code sql citation-fallback', tabindex: '-1' }, formatSql(c.quote));
    item.append(fallback);
    fallback.focus();
  });
  const item = h(
    'li',
    { class: `citation citation-${c.kind}` },
    h('div', { class: 'citation-head' }, h('span', { class: `badge kind-${c.kind}` }, isSql ? 'SQL' : c.kind === 'document' ? 'Document' : c.kind), ' ', h('code', { class: 'source-id' }, c.source_id), c.title ? h('span', { class: 'citation-title' }, ` — ${c.title}`) : null),
    !isSql && c.quote ? h('blockquote', {}, c.quote) : null,
    h('div', { class: 'citation-actions' }, open),
  );
  return item;
}

/** A file the job's code wrote, among the sources: what it is, which step wrote it, and a way to it. */
function fileCitation(a) {
  return h(
    'li',
    { class: 'citation citation-file' },
    h('div', { class: 'citation-head' }, h('span', { class: 'badge kind-file' }, a.media_type && a.media_type.startsWith('image/') ? 'Chart' : 'File'), ' ', h('code', { class: 'source-id' }, a.name), h('span', { class: 'citation-title' }, ` — written by step ${a.step.id} (${a.step.kind})`)),
    h('div', { class: 'citation-actions' }, h('button', { type: 'button', class: 'quiet small cite-open', on: { click: () => openArtifact(a.ref) } }, 'Show the file with its step')),
  );
}

function renderCitations({ citations, files }) {
  const count = citations.length + files.length;
  if (!count) return null;
  return section(`Citations (${count})`, 'citations-title', h('ol', { class: 'citations', id: 'citations' }, citations.map(citationItem), files.map(fileCitation)));
}

const NO_PLAN = {
  failed: 'No plan: the job failed before a plan was made.',
  cancelled: 'No plan: the job was cancelled before a plan was made.',
  completed: 'No plan was needed.',
};

function renderSteps(steps, status) {
  // "Planning…" only while planning can still happen: a finished job without steps says why there are none.
  if (!steps.length) return section('Plan', 'steps-title', h('p', { class: 'muted', id: 'plan-state' }, NO_PLAN[status] || 'Planning…'));
  return section(
    'Plan',
    'steps-title',
    h(
      'div',
      { class: 'table-wrap', role: 'region', 'aria-label': 'Plan steps', tabindex: '0' },
      h(
        'table',
        { class: 'steps', id: 'steps-table' },
        h('thead', {}, h('tr', {}, ['#', 'Step', 'State', 'Attempts', 'Tokens', 'Model', 'Started', 'Took'].map((t) => h('th', { scope: 'col' }, t)))),
        h(
          'tbody',
          {},
          steps.map((s, i) =>
            h(
              'tr',
              { dataset: { stepId: s.id, state: s.state } },
              h('td', {}, String(i + 1)),
              h(
                'th',
                { scope: 'row' },
                h('span', { class: 'step-title', title: s.title }, s.title),
                h('span', { class: 'step-kind' }, h('code', {}, s.kind), ` · ${s.id}`),
                s.error ? h('span', { class: 'step-error' }, errorBox(s.error)) : null,
              ),
              // A step waiting out a backoff says when it retries and which attempt comes next.
              h('td', {}, badge(s.state, STEP_LABELS, 'step'), s.state === 'retrying' && s.message ? h('span', { class: 'muted step-retry' }, ` ${s.message}`) : null),
              h('td', { class: 'num' }, String(s.attempts ?? 0)),
              h('td', { class: 'num', title: s.usage ? `${fmtNumber(s.usage.tokens_input)} in, ${fmtNumber(s.usage.tokens_output)} out` : null }, s.usage ? fmtNumber(s.usage.total_tokens) : '—'),
              h('td', {}, s.model || '—', s.model === OFFLINE_MODEL ? [' ', offlineLabel(s.model)] : null),
              h('td', {}, timeEl(s.started_at, { short: true })),
              // The time a human took to answer is shown apart; it is not part of the step's duration.
              h(
                'td',
                { class: 'num', title: s.waited_ms ? `plus ${fmtMs(s.waited_ms)} waiting for an answer` : null },
                s.duration_ms != null ? fmtMs(s.duration_ms) : s.ended_at ? fmtDuration(s.started_at, s.ended_at) : s.state === 'running' ? 'running' : '—',
                s.waited_ms ? h('span', { class: 'muted step-waited' }, ` (+${fmtMs(s.waited_ms)} waiting)`) : null,
              ),
            ),
          ),
        ),
      ),
    ),
  );
}

// ----- a workflow run as its graph -------------------------------------------------------------


/** The step states a run graph shows, in the catalog's order (its step_states); any it does not list, after. */
function legendStates(seen) {
  const order = catalog ? catalog.step_states : [];
  return [...order.filter((st) => seen.has(st)), ...[...seen].filter((st) => !order.includes(st))];
}

/** The workflow the run loaded, drawn as the builder draws it (graph.js), each node coloured by its step's state. */
function renderRunGraph({ graph, states }) {
  const byId = new Map(states);
  const host = h('div', { class: 'run-graph-wrap', role: 'region', 'aria-label': 'Run graph', tabindex: '0' });
  renderGraph(host, graph, {
    onSelect: (id) => {
      const row = document.querySelector(`#steps-table tr[data-step-id="${CSS.escape(id)}"]`);
      if (row) row.scrollIntoView({ block: 'center' });
    },
  });
  for (const node of host.querySelectorAll('g.g-node')) {
    const stepState = byId.get(node.dataset.node) || 'pending';
    node.classList.add(`g-state-${stepState}`);
    node.dataset.state = stepState;
    const title = node.querySelector('title');
    if (title) title.textContent += ` — ${STEP_LABELS[stepState] || stepState}`;
  }
  const svgEl = host.querySelector('svg');
  if (svgEl) svgEl.setAttribute('aria-label', `Run graph: ${states.map(([id, st]) => `${id} ${STEP_LABELS[st] || st}`).join(', ')}`);
  const seen = new Set(states.map(([, st]) => st));
  const legend = h('ul', { class: 'graph-legend', 'aria-hidden': 'true' }, legendStates(seen).map((st) => h('li', {}, h('span', { class: `graph-swatch g-state-${st}` }), STEP_LABELS[st] || st)));
  return section('Run graph', 'graph-title', legend, host);
}

// ----- agent mode: the Executor's turns --------------------------------------------------------

const AGENT_COLUMNS = ['#', 'Tool call', 'Turn', 'State', 'Input', 'Output', 'Took', 'Tokens'];

/**
 * Keep the log lines of the Executor's turns, each with its turn: a turn ends with a line that is not a
 * failure, so a failed attempt belongs to the turn after the last one that ended (its retry comes next).
 */
function collectTurnLines(d, log) {
  for (const entry of (log && log.entries) || []) {
    if (entry.seq <= d.turnSeq || !isTurnLine(entry)) continue;
    d.turnSeq = entry.seq;
    const failed = entry.failed === true;
    if (!failed) d.turnsEnded += 1;
    d.turnLines.push({ seq: entry.seq, time: entry.time, message: String(entry.message), turn: failed ? d.turnsEnded + 1 : d.turnsEnded, failed });
  }
}

function stepDuration(s) {
  if (s.duration_ms != null) return fmtMs(s.duration_ms);
  if (s.ended_at) return fmtDuration(s.started_at, s.ended_at);
  return s.state === 'running' ? 'running' : '—';
}

/** One tool call (or the answer step) as a row: every value is text from the view. */
function toolCallRow(s, index) {
  const usage = s.usage || null;
  const output = s.tool_output || s.message || (s.state === 'waiting' ? 'waiting for your answer' : null);
  return h(
    'tr',
    { dataset: { stepId: s.id, state: s.state, turn: s.turn == null ? '' : String(s.turn) } },
    h('td', {}, String(index)),
    h(
      'th',
      { scope: 'row' },
      h('code', { class: 'tool-name' }, s.kind),
      h('span', { class: 'step-kind' }, ` · ${s.id}`, s.attempts > 1 ? ` · ${s.attempts} attempts` : ''),
      s.error ? h('span', { class: 'step-error' }, errorBox(s.error)) : null,
    ),
    h('td', { class: 'num tool-turn' }, s.turn == null ? '—' : String(s.turn)),
    h('td', {}, badge(s.state, STEP_LABELS, 'step'), s.state === 'retrying' && s.message ? h('span', { class: 'muted step-retry' }, ` ${s.message}`) : null),
    h('td', { class: 'tool-io tool-input' }, s.tool_input ? h('code', {}, s.tool_input) : h('span', { class: 'muted' }, '—')),
    h('td', { class: 'tool-io tool-output' }, output ? String(output) : h('span', { class: 'muted' }, '—')),
    h(
      'td',
      { class: 'num', title: s.waited_ms ? `plus ${fmtMs(s.waited_ms)} waiting for an answer` : null },
      stepDuration(s),
      s.waited_ms ? h('span', { class: 'muted step-waited' }, ` (+${fmtMs(s.waited_ms)} waiting)`) : null,
    ),
    h(
      'td',
      { class: 'num', title: usage ? `${fmtNumber(usage.tokens_input)} in, ${fmtNumber(usage.tokens_output)} out${s.model ? ` · ${s.model}` : ''}` : null },
      usage ? fmtNumber(usage.total_tokens) : '—',
    ),
  );
}

function turnGroup(label, attrs, lines, rows) {
  const span = String(AGENT_COLUMNS.length);
  return h(
    'tbody',
    attrs,
    h('tr', { class: 'turn-head' }, h('th', { scope: 'rowgroup', colspan: span }, label)),
    lines.length
      ? h(
          'tr',
          { class: 'turn-reasoning' },
          h('td', { colspan: span }, h('ul', { class: 'reasoning' }, lines.map((l) => h('li', { class: l.failed ? 'failed' : null, dataset: { seq: String(l.seq) } }, timeEl(l.time, { short: true }), ' ', h('span', { class: 'log-message' }, l.message))))),
        )
      : null,
    rows,
  );
}

/** Agent mode: instead of a plan, the Executor's turns, each with its log lines and its tool calls as rows. */
function renderAgent(steps, finished, lines) {
  const calls = steps.filter((s) => s.turn != null);
  const others = steps.filter((s) => s.turn == null);
  const turns = Math.max(0, ...calls.map((s) => s.turn), ...lines.map((l) => l.turn));
  const title = `Executor${turns ? ` · ${turns} turn${turns === 1 ? '' : 's'}, ${calls.length} tool call${calls.length === 1 ? '' : 's'}` : ''}`;
  if (!turns && !others.length) {
    const none = finished ? 'The Executor made no tool calls.' : 'The Executor is starting…';
    return section(title, 'steps-title', h('p', { class: 'muted', id: 'plan-state' }, none));
  }
  const number = new Map(steps.map((s, i) => [s.id, i + 1]));
  const groups = [];
  for (let t = 1; t <= turns; t += 1) {
    const mine = calls.filter((s) => s.turn === t);
    const said = mine.length ? `${mine.length} tool call${mine.length === 1 ? '' : 's'}` : 'no tool calls';
    groups.push(turnGroup(`Turn ${t} · ${said}`, { class: 'turn', dataset: { turn: String(t) } }, lines.filter((l) => l.turn === t), mine.map((s) => toolCallRow(s, number.get(s.id)))));
  }
  if (others.length) groups.push(turnGroup('Answer', { class: 'turn turn-answer' }, [], others.map((s) => toolCallRow(s, number.get(s.id)))));
  return section(
    title,
    'steps-title',
    h(
      'div',
      { class: 'table-wrap', role: 'region', 'aria-label': 'Executor turns and tool calls', tabindex: '0' },
      h('table', { class: 'steps agent', id: 'agent-table' }, h('thead', {}, h('tr', {}, AGENT_COLUMNS.map((c) => h('th', { scope: 'col' }, c)))), groups),
    ),
  );
}

function sqlResult(step, out) {
  return h(
    'article',
    { class: 'result result-sql', tabindex: '-1', dataset: { stepId: step.id, sourceId: out.source_id || `sql:${step.id}` } },
    h('h4', {}, `${step.id} · ${step.title}`),
    out.verified_query
      ? h('p', { class: 'verified-note' }, h('span', { class: 'badge claim-badge-verified' }, 'Verified query'), ` ${out.verified_query.name}`, out.verified_query.approved_by ? `, approved by ${out.verified_query.approved_by}` : '', out.verified_query.approved_at ? ` on ${String(out.verified_query.approved_at).slice(0, 10)}` : '')
      : null,
    h('pre', { class: 'code sql' }, formatSql(out.sql)),
    out.tables && out.tables.length ? h('p', { class: 'muted' }, 'Tables: ', out.tables.join(', ')) : null,
    out.sql && out.rows && !out.verified_query ? saveVerifiedForm(step, out) : null,
    out.columns
      ? dataTable(out.columns, out.rows || [], {
          caption: `${out.row_count ?? (out.rows || []).length} row${(out.row_count ?? (out.rows || []).length) === 1 ? '' : 's'}${out.truncated ? ' (truncated by the row cap)' : ''}`,
          label: `Result of ${step.id}`,
        })
      : null,
  );
}

/**
 * Save a statement that ran as a verified query (POST /api/verified-queries): its question and SQL with slots
 * such as {region}, and each slot's allowed values. The server guards the statement and names any problem.
 */
function saveVerifiedForm(step, out) {
  const slug = (text) => text.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '').replace(/^[^a-z]+/, '').slice(0, 60) || 'query';
  const name = h('input', { type: 'text', class: 'vq-name', value: out.question || step.title, 'aria-label': 'Verified query name' });
  const question = h('input', { type: 'text', class: 'vq-question', value: out.question || '', 'aria-label': 'Question it answers, with slots such as {region}' });
  const sql = h('textarea', { class: 'vq-sql code', rows: '4', spellcheck: 'false', 'aria-label': 'Statement, with the same slots', value: out.sql });
  const variables = h('textarea', { class: 'vq-variables', rows: '2', placeholder: 'region: North, South, East, West', 'aria-label': 'Slot values, one slot a line (name: value, value)' });
  const status = h('p', { class: 'vq-status muted', role: 'status' });
  const alertEl = h('div', { class: 'alert', hidden: true });
  const save = async () => {
    clearAlert(alertEl);
    const slots = {};
    for (const line of variables.value.split('\n').map((l) => l.trim()).filter(Boolean)) {
      const [slot, values] = line.split(/:(.*)/s);
      slots[slot.trim()] = { values: (values || '').split(',').map((v) => v.trim()).filter(Boolean) };
    }
    const body = { id: slug(name.value), name: name.value.trim(), question: question.value.trim(), sql: sql.value.trim(), variables: slots };
    try {
      const saved = await api('/api/verified-queries', { method: 'POST', body });
      status.textContent = `Saved as verified query “${saved.id}”: later questions that match it use this statement.`;
    } catch (err) {
      handleAuth(err);
      showAlert(alertEl, err, { title: 'Not saved:' });
    }
  };
  return h(
    'details',
    { class: 'save-verified' },
    h('summary', {}, 'Save as verified query'),
    h('label', {}, 'Name ', name),
    h('label', {}, 'Question (slots like {region}) ', question),
    h('label', {}, 'Statement (the same slots) ', sql),
    h('label', {}, 'Slot values ', variables),
    h('button', { type: 'button', class: 'small vq-save', on: { click: save } }, 'Save'),
    alertEl,
    status,
  );
}

function docResult(step, out) {
  const chunks = out.chunks || [];
  return h(
    'article',
    { class: 'result result-docs', dataset: { stepId: step.id } },
    h('h4', {}, `${step.id} · ${step.title}`),
    out.query ? h('p', { class: 'muted' }, 'Search: ', out.query) : null,
    chunks.length
      ? h(
          'ul',
          { class: 'chunks' },
          chunks.map((c) =>
            h(
              'li',
              {},
              h(
                'details',
                { class: 'chunk', tabindex: '-1', dataset: { sourceId: c.source_id } },
                h('summary', {}, h('code', { class: 'source-id' }, c.source_id), c.title ? ` ${c.title}` : '', typeof c.score === 'number' ? h('span', { class: 'muted' }, ` · score ${c.score.toFixed(2)}`) : null),
                h('p', { class: 'chunk-content' }, c.content || ''),
              ),
            ),
          ),
        )
      : h('p', { class: 'muted' }, 'No document matched.'),
  );
}

const artifactUrls = new Map();

/** An artifact's bytes as a blob URL, fetched once per job and ref (with the key, as every API call). */
function artifactUrl(a) {
  const base = `${API}/${encodeURIComponent(state.detail.id)}/artifacts/`;
  const key = `${state.detail.id}/${a.ref}`;
  if (!artifactUrls.has(key)) {
    const headers = {};
    const fnKey = state.auth.signIn ? '' : getKey();
    if (fnKey) headers['x-functions-key'] = fnKey;
    const loading = fetch(base + encodeURIComponent(a.ref), { headers, credentials: 'same-origin' }).then(async (resp) => {
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      return URL.createObjectURL(await resp.blob());
    });
    loading.catch(() => artifactUrls.delete(key));
    artifactUrls.set(key, loading);
  }
  return artifactUrls.get(key);
}

/** One file a step wrote: a PNG inline, anything else a download link. */
function artifactItem(a, { id } = {}) {
  const label = `${a.name} (${fmtNumber(a.size)} bytes)`;
  if (a.media_type === 'image/png') {
    const img = h('img', { class: 'artifact-image', alt: label });
    artifactUrl(a).then((url) => { img.src = url; }, () => { img.alt = `${label}: could not be loaded`; });
    return h('li', { id, tabindex: id ? '-1' : null, dataset: { artifact: a.ref } }, img, h('span', { class: 'muted', text: label }));
  }
  const link = h('a', { href: '#', text: label });
  link.addEventListener('click', (ev) => {
    ev.preventDefault();
    artifactUrl(a).then((url) => { const save = h('a', { href: url, download: a.name }); save.click(); }, () => { link.textContent = `${label}: could not be loaded`; });
  });
  return h('li', { id, tabindex: id ? '-1' : null, dataset: { artifact: a.ref } }, link);
}

/** Files a step wrote (run_python): PNGs shown inline, the others as download links; fetched with the key, as blobs. */
function artifactList(step) {
  if (!Array.isArray(step.artifacts) || !step.artifacts.length || !state.detail) return null;
  return h('ul', { class: 'artifacts' }, ...step.artifacts.map((a) => artifactItem(a, { id: `artifact-${a.ref}` })));
}

/** Every file the job's steps wrote, with the step that wrote it. */
function jobArtifacts(steps) {
  return steps.flatMap((s) => (Array.isArray(s.artifacts) ? s.artifacts.map((a) => ({ ...a, step: s })) : []));
}

function openArtifact(ref) {
  const target = document.getElementById(`artifact-${ref}`);
  if (!target) return;
  target.scrollIntoView({ block: 'center' });
  target.focus({ preventScroll: true });
  target.classList.remove('flash');
  void target.offsetWidth;
  target.classList.add('flash');
}

const SCALAR = new Set(['string', 'number', 'boolean']);

/** The plain values of a step's output as labelled text: a tool's data, a run's result, or the output itself. */
function outputSummary(out) {
  const inner = out && typeof out.data === 'object' && out.data !== null ? out.data : out && typeof out.result === 'object' && out.result !== null ? out.result : out;
  if (!inner || typeof inner !== 'object' || Array.isArray(inner)) return null;
  const shown = Object.entries(inner).filter(([, val]) => SCALAR.has(typeof val) && String(val).length <= 300).slice(0, 16);
  if (!shown.length) return null;
  return h('dl', { class: 'meta result-values' }, shown.map(([k, val]) => h('div', {}, h('dt', {}, k.replace(/_/g, ' ')), h('dd', {}, typeof val === 'number' ? fmtNumber(val) : String(val)))));
}

/** A step's raw output, whole, behind a disclosure (never cut: a cut JSON object reads as nonsense). */
function rawOutput(out) {
  const text = JSON.stringify(out, null, 2);
  const lines = text.split('\n').length;
  return h('details', { class: 'raw-output' }, h('summary', {}, `Raw output (JSON, ${fmtNumber(lines)} line${lines === 1 ? '' : 's'})`), h('pre', { class: 'code' }, text));
}

function otherResult(step, out) {
  const answer = typeof out.answer === 'string' ? h('div', { class: 'result-answer' }, renderAnswerText(out.answer, out.citations || [])) : null;
  return h(
    'article',
    { class: 'result result-other', dataset: { stepId: step.id } },
    h('h4', {}, `${step.id} · ${step.title}`),
    artifactList(step),
    answer || outputSummary(out),
    rawOutput(out),
  );
}

function renderResults(steps) {
  const items = [];
  for (const step of steps) {
    // Drawn by the shape of the kind's result (the catalog's), not by the kind's name; the answer is shown apart.
    const shape = resultShape(step.kind);
    if (step.output && shape === 'sql') items.push(sqlResult(step, step.output));
    else if (step.output && shape === 'documents') items.push(docResult(step, step.output));
    else if (step.output && shape !== 'answer') items.push(otherResult(step, step.output));
    if (step.draft && !step.output && step.state !== 'waiting') {
      items.push(h('article', { class: 'result result-draft' }, h('h4', {}, `${step.id} · drafted SQL (not run)`), h('pre', { class: 'code sql' }, formatSql(step.draft.sql || ''))));
    }
  }
  if (!items.length) return null;
  return section('Step results', 'results-title', items);
}

function renderUsage(data) {
  const { usage, steps, agent } = data;
  if (!usage || !usage.total) return null;
  const row = (label, u, cls) =>
    h(
      'tr',
      { class: cls || null },
      h('th', { scope: 'row' }, label),
      h('td', { class: 'num' }, fmtNumber(u && u.tokens_input)),
      h('td', { class: 'num' }, fmtNumber(u && u.tokens_output)),
      h('td', { class: 'num' }, fmtNumber(u && u.total_tokens)),
      h('td', { class: 'num' }, fmtCost(u && u.estimated_cost, digits)),
    );
  const byStep = usage.by_step || {};
  const digits = costDigits([usage.planning, usage.executor, usage.total, ...steps.map((s) => byStep[s.id])].map((u) => u && u.estimated_cost));
  // Agent mode has no planning: its model calls are the Executor's turns (when the view reports them).
  const head = agent ? (usage.executor ? row('Executor turns', usage.executor) : null) : row('Planning', usage.planning);
  const label = (s) => `${s.id} · ${KIND_LABELS[s.kind] || s.kind}${s.turn != null ? ` (turn ${s.turn})` : ''}`;
  return section(
    'Usage',
    'usage-title',
    h(
      'div',
      { class: 'table-wrap', role: 'region', 'aria-label': 'Token usage', tabindex: '0' },
      h(
        'table',
        { class: 'usage', id: 'usage-table' },
        h('thead', {}, h('tr', {}, ['', 'Input tokens', 'Output tokens', 'Total tokens', 'Est. cost'].map((t, i) => h('th', { scope: 'col', class: i ? 'num' : null }, t)))),
        h('tbody', {}, head, usage.supervisor && usage.supervisor.total_tokens ? row('Supervisor', usage.supervisor) : null, steps.map((s) => row(label(s), byStep[s.id]))),
        h('tfoot', {}, row('Total', usage.total, 'total')),
      ),
    ),
  );
}

function appendLog(d, log) {
  if (!log) return;
  for (const entry of log.entries || []) {
    if (entry.seq < d.logCursor) continue;
    d.logList.append(h('li', { dataset: { seq: String(entry.seq) } }, timeEl(entry.time, { short: true }), ' ', h('span', { class: 'log-message' }, entry.message)));
    if (entry.time) d.lastLogTime = entry.time;
  }
  if (typeof log.next_cursor === 'number' && log.next_cursor > d.logCursor) d.logCursor = log.next_cursor;
  const live = log.live || [];
  d.liveList.replaceChildren(...live.map((l) => h('li', { class: 'live-line' }, timeEl(l.time, { short: true }), ' ', h('span', { class: 'log-message' }, l.message))));
  d.liveList.hidden = !live.length;
  const count = d.logList.children.length;
  d.logInfo.textContent = `${count} entr${count === 1 ? 'y' : 'ies'}${log.complete ? '' : ', loading more…'}`;
}

// What web/fork.js uses of this page (it has no helpers of its own).
const FORK_UI = { h, section, api, jobUrl, errorBox, fieldEditors, editedFields, fmtNumber, fmtMs, nodeForkEdits, catalogFields, loadCatalog, editFieldsKnown: (kind) => Boolean(editFieldsOf(kind)), stepKind: (kind) => (catalog && catalog.step_kinds.find((k) => k.kind === kind)) || null, requestEnum: (path) => (catalog && (schemaAt(catalog.job_request_schema, path) || {}).enum) || [] };

function render(d, v) {
  d.view = v;
  // The view says whether the job has ended (its statuses are the server's: api/contract/view.py).
  const terminal = v.finished === true;
  if (d.lastStatus !== v.status) {
    d.liveStatus.textContent = `Job status: ${STATUS_LABELS[v.status] || v.status}`;
    d.lastStatus = v.status;
    updateListedStatus(v.id, v.status);
  }
  updateListedCost(v);
  renderSlot(d, 'header', { q: v.question, s: v.status, id: v.id, c: v.created_at, m: v.mode, cat: Boolean(catalog) }, () => renderHeader(d, v));
  updateHeader(d, v);
  renderSlot(d, 'actions', { terminal, failed: v.status === 'failed' }, ({ terminal: t, failed }) => renderActions(d, t, failed));
  renderSlot(d, 'failure', v.status === 'failed' && v.error ? { e: v.error, steps: v.steps.map((s) => [s.id, s.title]) } : null, () => renderFailure(v));
  // Keyed by the question only: polling must not wipe what the user is typing.
  if (!catalog) loadCatalog().then((c) => c && state.detail === d && d.view && render(d, d.view));
  renderSlot(d, 'waiting', v.waiting && !terminal ? { q: v.waiting.question_id, cat: Boolean(catalog) } : null, () => renderWaiting(d, v.waiting));
  // While the event stream is open the answer being written comes from its deltas, else from the view.
  const live = !v.answer ? (d.streaming ? d.draft.current() : liveAnswer(v)) : null;
  const writer = v.steps.find((s) => resultShape(s.kind) === 'answer' && s.state === 'succeeded');
  const files = jobArtifacts(v.steps);
  const fileKey = (list) => list.map(({ step, ...a }) => ({ ...a, step: { id: step.id, kind: step.kind } }));
  const answer = v.answer ? { ...v.answer, citations: answerCitations(v) } : null;
  renderSlot(d, 'answer', answer ? { answer, model: writer ? writer.model || null : null, files: fileKey(files) } : live ? { live } : null, (data) => renderAnswer(data.files ? { ...data, files } : data));
  renderSlot(d, 'citations', answer ? { citations: answer.citations, files: fileKey(files) } : null, (data) => renderCitations({ ...data, files }));
  const graph = v.run && v.run.graph && Array.isArray(v.run.graph.nodes) ? v.run.graph : null;
  // Drawn again once the catalog loads: which node fields are edges is its word (graph.js).
  renderSlot(d, 'graph', graph ? { graph, states: v.steps.map((s) => [s.id, s.state]), cat: Boolean(catalog) } : null, renderRunGraph);
  const agent = v.mode === 'agent' || (v.plan && v.plan.status === 'agent');
  collectTurnLines(d, v.log);
  const stepsKey = { s: v.steps.map(({ output, draft, partial_output: p, ...rest }) => rest), t: v.steps.length ? null : v.status, cat: Boolean(catalog) };
  if (agent) renderSlot(d, 'steps', { ...stepsKey, a: d.turnLines, done: terminal }, () => renderAgent(v.steps, terminal, d.turnLines));
  else renderSlot(d, 'steps', stepsKey, () => renderSteps(v.steps, v.status));
  d.timeline.view(v);
  renderSlot(d, 'results', { s: v.steps.map((s) => [s.id, s.state, s.output || null, s.draft || null]), cat: Boolean(catalog) }, () => renderResults(v.steps));
  renderSlot(d, 'usage', { usage: v.usage, agent, steps: v.steps.map((s) => ({ id: s.id, kind: s.kind, turn: s.turn })) }, renderUsage);
  renderSlot(d, 'cost', { cost: v.cost, status: v.status }, (data) => renderCost(d, data));
  // A finished job or run may be re-run from a step (a run: from a node), and compared with its origin or forks (web/fork.js).
  const forkable = terminal;
  renderSlot(d, 'fork', forkable ? { id: v.id, from: v.forked_from, forks: v.forks || [], steps: v.steps.map((s) => [s.id, s.state]) } : null, () => renderFork(FORK_UI, v));
  appendLog(d, v.log);
}

// ----- the event stream -------------------------------------------------------------------------

// Committed events after which the view (steps, results, question, usage, log) is read again.
const REFRESH_TYPES = new Set(['status', 'step', 'question', 'tool_call', 'usage', 'end']);

function streamUrl(id) {
  const key = state.auth.signIn ? '' : currentKey();
  // EventSource sends no headers: the function key goes in the `code` parameter Azure Functions reads.
  return `${jobUrl(id, '/events')}${key ? `?code=${encodeURIComponent(key)}` : ''}`;
}

/** Follow the job through its event stream; when it cannot be opened, the view is polled instead. */
function startStream(d) {
  if (d.stopped || d.stream || d.ended || typeof EventSource !== 'function') return;
  d.streaming = true;
  d.stream = followStream(streamUrl(d.id), {
    after: d.lastEventId,
    onEvent: (type, data, id) => onStreamEvent(d, type, data, id),
    onOpen: () => clearAlert(d.connection),
    onBreak: () => showAlert(d.connection, { message: 'The live stream was interrupted; reconnecting where it stopped…' }),
    onUnavailable: () => {
      d.stream = null;
      d.streaming = false;
      pollNow(d);
    },
    onEnd: () => {
      d.stream = null;
      d.streaming = false;
      d.ended = true;
      pollNow(d);
    },
  });
}

function onStreamEvent(d, type, data, id) {
  if (d.stopped) return;
  if (id) d.lastEventId = id;
  d.timeline.event(type, data);
  if (type === 'delta') d.draft.add(data);
  else if (type === 'superseded') d.draft.supersede(data);
  if (type === 'delta' || type === 'superseded') showDraft(d);
  else if (REFRESH_TYPES.has(type) && !(d.view && d.view.finished)) pollNow(d);
}

/** The answer as it is written (deltas), until the view holds the committed one. */
function showDraft(d) {
  if (!d.view || d.view.answer) return;
  const live = d.draft.current();
  renderSlot(d, 'answer', live ? { live } : null, renderAnswer);
}

// ----- polling ----------------------------------------------------------------------------------

function schedule(d, ms) {
  clearTimeout(d.timer);
  if (!d.stopped) d.timer = setTimeout(() => poll(d), ms);
}

function pollNow(d) {
  if (d.stopped) return;
  if (d.inflight) {
    d.again = true;
    return;
  }
  schedule(d, 0);
}

function resumeDetail(d) {
  d.halted = false;
  clearAlert(d.connection);
  pollNow(d);
  startStream(d);
}

async function poll(d) {
  if (d.stopped || d.inflight) return;
  if (document.hidden) {
    // No polling in a background tab; visibilitychange resumes it.
    d.paused = true;
    return;
  }
  d.inflight = true;
  d.again = false;
  d.controller = new AbortController();
  let view;
  try {
    view = await api(`${jobUrl(d.id)}?log_cursor=${d.logCursor}&log_limit=${LOG_PAGE}`, { signal: d.controller.signal });
  } catch (err) {
    d.inflight = false;
    if (d.stopped || err.name === 'AbortError') return;
    if (err.status === 401 || err.status === 403 || err.status === 404) {
      d.halted = true;
      if (!handleAuth(err)) showAlert(d.connection, err, { title: 'The job could not be shown:' });
      return;
    }
    d.failures += 1;
    const wait = Math.min(MAX_BACKOFF_MS, POLL_MS * 2 ** d.failures);
    showAlert(d.connection, err, { title: `Connection problem; retrying in ${Math.round(wait / 1000)} s:` });
    schedule(d, wait);
    return;
  }
  d.inflight = false;
  if (d.stopped) return;
  d.failures = 0;
  clearAlert(d.connection);
  render(d, view);
  const moreLog = view.log && !view.log.complete;
  // While the event stream is open it says when to read the view again: no polling.
  if ((view.finished || d.streaming) && !moreLog && !d.again) return;
  schedule(d, moreLog || d.again ? 0 : POLL_MS);
}

function closeJob() {
  const d = state.detail;
  if (!d) return;
  d.stopped = true;
  clearTimeout(d.timer);
  if (d.controller) d.controller.abort();
  if (d.stream) d.stream.close();
  d.timeline.stop();
  state.detail = null;
}

function openJob(id, { focus = false } = {}) {
  if (state.detail && state.detail.id === id) return;
  closeJob();
  const d = {
    id,
    memo: new Map(),
    logCursor: 0,
    failures: 0,
    timer: null,
    controller: null,
    inflight: false,
    again: false,
    stopped: false,
    halted: false,
    paused: false,
    lastStatus: null,
    view: null,
    // Agent mode: the Executor's turn lines from the log, the last one read, and how many turns ended.
    turnLines: [],
    turnSeq: -1,
    turnsEnded: 0,
    // The event stream: its follower, the last event id read, whether it reached the job's end.
    stream: null,
    streaming: false,
    lastEventId: null,
    ended: false,
    draft: createDraft(),
    timeline: null,
  };
  state.detail = d;
  buildDetail(d);
  d.timeline = createTimeline(d.slots.timeline);
  markSelected(id);
  poll(d).then(() => {
    if (!d.halted) startStream(d);
    if (focus && state.detail === d) {
      const heading = document.getElementById('detail-heading');
      if (heading) heading.focus();
    }
  });
}

function showNoJob() {
  closeJob();
  $('#detail').hidden = true;
  $('#detail').replaceChildren();
  $('#detail-empty').hidden = false;
  document.body.classList.remove('has-job');
  markSelected(null);
}

function jobFromHash() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ''));
  const id = (params.get('job') || '').trim();
  return id || null;
}

function route({ focus = false } = {}) {
  const id = jobFromHash();
  if (id) openJob(id, { focus });
  else showNoJob();
}

// ----- start ------------------------------------------------------------------------------------

async function main() {
  forgetStoredKey();
  state.auth = await detectSignIn();
  if (state.auth.signIn) initSignIn();
  else initKey();
  initForm();
  initJobs();
  window.addEventListener('hashchange', () => route({ focus: true }));
  document.addEventListener('visibilitychange', () => {
    const d = state.detail;
    if (!document.hidden && d && d.paused) {
      d.paused = false;
      pollNow(d);
    }
  });
  await loadCatalog();
  route();
  loadJobs({ reset: true });
  document.documentElement.dataset.ready = 'true';
}

main();

// The definitions pages (definitions.js) reuse the API call (key or sign-in) and the DOM helper.
export { api, h, ApiError, errorBox, loadCatalog };

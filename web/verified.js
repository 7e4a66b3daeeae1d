// The verified queries page (#verified-queries): list, edit and retire the statements people approved, as the server
// gives them (GET /api/verified-queries?retired=true). What a row offers comes from the server too: `editable` (the
// caller owns it or is an admin) shows Edit and Retire; `shared` says everyone sees it. The server checks the
// statement and the slots on save and its error is shown at the form, as it names it.

import { api, h, errorBox } from './app.js';

const PAGE = '#verified-queries';
const ui = { load: 0, failed: false };

/** "region: North, South" lines from a query's variables (the form's text), and back. */
function slotsText(variables) {
  return Object.entries(variables || {}).map(([slot, s]) => `${slot}: ${(s.values || []).join(', ')}`).join('\n');
}

function parseSlots(text) {
  const slots = {};
  for (const line of text.split('\n').map((l) => l.trim()).filter(Boolean)) {
    const [slot, values] = line.split(/:(.*)/s);
    slots[slot.trim()] = { values: (values || '').split(',').map((v) => v.trim()).filter(Boolean) };
  }
  return slots;
}

function alertBox() {
  return h('div', { class: 'alert', role: 'alert', hidden: true });
}

function showError(el, err, title) {
  el.replaceChildren(errorBox(err, { title }));
  el.hidden = false;
}

/** The edit form of one query: its name, question, statement and slot values; Save sends PUT. */
function editForm(q, done) {
  const name = h('input', { type: 'text', class: 'vq-edit-name', value: q.name, 'aria-label': 'Name' });
  const question = h('input', { type: 'text', class: 'vq-edit-question', value: q.question, 'aria-label': 'Question (slots like {region})' });
  const sql = h('textarea', { class: 'vq-edit-sql code', rows: '4', spellcheck: 'false', value: q.sql, 'aria-label': 'Statement (the same slots)' });
  const variables = h('textarea', { class: 'vq-edit-variables', rows: '2', value: slotsText(q.variables), 'aria-label': 'Slot values (name: value, value)' });
  const errorEl = alertBox();
  const save = async () => {
    errorEl.hidden = true;
    const body = { name: name.value.trim(), question: question.value.trim(), sql: sql.value.trim(), variables: parseSlots(variables.value) };
    if (q.approved_in) body.approved_in = q.approved_in;
    try {
      const saved = await api(`/api/verified-queries/${encodeURIComponent(q.id)}`, { method: 'PUT', body });
      done(`Saved “${saved.id}”: approved again by ${saved.approved_by || 'you'}.`);
    } catch (err) {
      showError(errorEl, err, 'Not saved:');
    }
  };
  return h(
    'form',
    { class: 'vq-edit', on: { submit: (e) => { e.preventDefault(); save(); } } },
    h('label', {}, 'Name ', name),
    h('label', {}, 'Question (slots like {region}) ', question),
    h('label', {}, 'Statement (the same slots) ', sql),
    h('label', {}, 'Slot values ', variables),
    h('div', { class: 'card-tools' }, h('button', { type: 'submit', class: 'small primary' }, 'Save'), h('button', { type: 'button', class: 'small quiet', on: { click: () => done(null) } }, 'Cancel')),
    errorEl,
  );
}

function row(q, status, reload) {
  const errorEl = alertBox();
  const holder = h('td', { colspan: '5', class: 'vq-editor' });
  const editorRow = h('tr', { class: 'vq-editor-row', hidden: true }, holder);
  const retire = async () => {
    if (!window.confirm(`Retire verified query “${q.id}”? Jobs stop using it; the record stays.`)) return;
    try {
      await api(`/api/verified-queries/${encodeURIComponent(q.id)}`, { method: 'DELETE' });
      reload(`Retired “${q.id}”.`);
    } catch (err) {
      showError(errorEl, err, 'Not retired:');
    }
  };
  const edit = () => {
    holder.replaceChildren(editForm(q, (message) => (message ? reload(message) : (editorRow.hidden = true))));
    editorRow.hidden = false;
    holder.querySelector('input').focus();
  };
  const who = q.owner ? q.owner.name || q.owner.id : null;
  const tools = q.editable && !q.retired
    ? [h('button', { type: 'button', class: 'small vq-edit-button', on: { click: edit } }, 'Edit'), ' ', h('button', { type: 'button', class: 'small quiet vq-retire', on: { click: retire } }, 'Retire')]
    : [];
  const main = h(
    'tr',
    { class: 'vq-row', dataset: { id: q.id } },
    h('td', {}, h('code', {}, q.id)),
    h('td', {}, h('strong', { class: 'vq-name' }, q.name), h('div', { class: 'muted small vq-question' }, q.question)),
    h('td', { class: 'small' }, q.approved_by ? `approved by ${q.approved_by}` : 'approved', q.approved_at ? ` on ${String(q.approved_at).slice(0, 10)}` : '', who ? h('div', { class: 'muted' }, `owner ${who}`) : null),
    h(
      'td',
      {},
      q.retired ? h('span', { class: 'badge vq-retired' }, 'retired') : h('span', { class: 'badge claim-badge-verified' }, 'live'),
      ' ',
      q.shared ? h('span', { class: 'badge vq-shared' }, 'shared') : h('span', { class: 'badge vq-private' }, 'private'),
    ),
    h('td', {}, ...tools, errorEl),
  );
  return [main, editorRow];
}

async function showPage(view, flash) {
  const load = ++ui.load;
  const status = h('p', { class: 'muted vq-flash', role: 'status' }, flash || '');
  const errorEl = alertBox();
  const body = h('tbody');
  const table = h('table', { class: 'defs-table vq-table' }, h('caption', { class: 'visually-hidden' }, 'Verified queries'), h('thead', {}, h('tr', {}, ['Id', 'Name and question', 'Approved', 'State', ''].map((c) => h('th', { scope: 'col' }, c)))), body);
  const empty = h('p', { class: 'muted vq-empty', hidden: true }, 'No verified queries yet. Save one from a SQL step of a job (“Save as verified query”).');
  view.replaceChildren(
    h(
      'section',
      { class: 'card defs-list' },
      h('div', { class: 'card-head' }, h('h2', { id: 'vq-title', tabindex: '-1' }, 'Verified queries')),
      h('p', { class: 'muted small' }, 'Statements people approved; a SQL step whose question matches one uses it (still guarded, a sensitive read still approved).'),
      status,
      errorEl,
      table,
      empty,
    ),
  );
  const reload = (message) => showPage(view, message);
  ui.failed = false;
  try {
    const data = await api('/api/verified-queries?retired=true');
    if (load !== ui.load) return;
    const items = data.verified_queries || [];
    body.replaceChildren(...items.flatMap((q) => row(q, status, reload)));
    empty.hidden = items.length > 0;
    table.hidden = items.length === 0;
  } catch (err) {
    if (load !== ui.load) return;
    ui.failed = true;
    showError(errorEl, err, 'Could not list the verified queries:');
  }
  document.documentElement.dataset.verified = 'ready';
}

/** Show the page when the address names it; the other pages' routers run first and are overruled here. */
function route() {
  const mine = location.hash === PAGE;
  let view = document.getElementById('vq-view');
  if (!mine) {
    if (view) view.hidden = true;
    ui.load += 1;
    return;
  }
  if (!view) {
    view = h('main', { id: 'vq-view', class: 'defs-view', 'aria-live': 'polite' });
    document.getElementById('defs-view').after(view);
  }
  document.querySelector('main.layout').hidden = true;
  document.getElementById('defs-view').hidden = true;
  for (const a of document.querySelectorAll('.views-nav a')) {
    if (a.dataset.view === 'verified') a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  view.hidden = false;
  delete document.documentElement.dataset.verified;
  showPage(view, null);
}

// After the jobs and definitions routers (registered earlier, on the same event): this page wins its address.
window.addEventListener('hashchange', () => setTimeout(route, 0));
// A new function key reads the list again only when it could not load: an edit in progress stays.
document.getElementById('function-key').addEventListener('change', () => location.hash === PAGE && ui.failed && setTimeout(route, 0));
// The first look waits for the console's start (sign-in or key known), as the jobs page does.
const start = () => (document.documentElement.dataset.ready === 'true' ? route() : setTimeout(start, 50));
start();

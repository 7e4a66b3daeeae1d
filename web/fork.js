// Forks in the console (docs/fork.md): "Re-run from here" on every step of a finished job, the origin and
// forks of a job, and two jobs side by side (GET /api/jobs/{id}/compare/{other}). app.js hands in its helpers.

/** The fork point of a step: a planned job's step id; an agent job's tool call forks at its turn. */
function forkPoint(step, agent) {
  if (!agent) return step.id;
  if (step.id === 'answer') return 'answer';
  return step.turn ? `turn-${step.turn}` : null;
}

/**
 * What the step's form starts from: each field a person may edit of its kind (the catalog's) that its output
 * shows as text (the SQL and its question, the search query); the answer step answers the job's own question.
 */
function startingInput(ui, step, question) {
  const out = step.output || {};
  const info = ui.stepKind(step.kind);
  if (!info) return {};
  const start = {};
  for (const f of info.editable_fields) if (typeof out[f.name] === 'string') start[f.name] = out[f.name];
  if (info.result === 'answer') start[info.text_field] = question;
  return start;
}

/**
 * The editors of a workflow (or team) run's node: what the catalog says a fork may edit of its kind (its step
 * kind's fields, or its own, as an agent's prompt); none for a node a fork edits nothing of.
 */
function nodeEditors(ui, v, step) {
  const nodes = (v.run.graph && v.run.graph.nodes) || [];
  const node = nodes.find((n) => n.id === step.id) || { kind: step.kind };
  const edits = ui.nodeForkEdits(node.kind);
  if (!edits) return [];
  if (edits.fields) return ui.fieldEditors(node.kind, {}, ui.catalogFields(edits.fields));
  const kind = node[edits.step_kind_from];
  // Only a kind the catalog lists edits as a step (a family tool's arguments are no step input).
  return kind && ui.editFieldsKnown(kind) ? ui.fieldEditors(kind, startingInput(ui, { ...step, kind }, v.question)) : [];
}

function forkForm(ui, v, step, agent, onDone) {
  const { h, fieldEditors, editedFields } = ui;
  const point = forkPoint(step, agent);
  // An agent's turn has no input a person edits: only the job's limits change. A run's node: from the catalog.
  const run = Boolean(v.run);
  const editors = agent ? [] : run ? nodeEditors(ui, v, step) : fieldEditors(step.kind, startingInput(ui, step, v.question));
  const maxTokens = h('input', { id: `fork-max-tokens-${step.id}`, type: 'number', min: '1', step: '1', inputmode: 'numeric' });
  const model = h('input', { id: `fork-model-${step.id}`, type: 'text', autocomplete: 'off', placeholder: 'the job’s models' });
  const approval = h(
    'select',
    { id: `fork-approval-${step.id}` },
    // The request schema's SQL approval choices (the catalog's); empty: as the job was asked.
    ['', ...ui.requestEnum('approval.sql')].map((value) => h('option', { value }, value || 'as the job')),
  );
  const error = h('div', { class: 'alert', role: 'alert', hidden: true });
  const submit = h('button', { type: 'submit', class: 'primary' }, `Re-run from ${point}`);
  const form = h(
    'form',
    { class: 'fork-form', dataset: { forkPoint: point } },
    editors.map((e) => e.node),
    h('div', { class: 'field' }, h('label', { for: maxTokens.id }, 'Fork: max tokens per call'), maxTokens),
    h('div', { class: 'field' }, h('label', { for: model.id }, 'Fork: model'), model),
    h('div', { class: 'field' }, h('label', { for: approval.id }, 'Fork: SQL approval'), approval),
    error,
    submit,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const changes = editedFields(editors);
    const constraints = {};
    if (maxTokens.value.trim()) constraints.max_tokens = Number(maxTokens.value);
    if (model.value.trim()) constraints.allowed_models = [model.value.trim()];
    if (Object.keys(constraints).length) changes.constraints = constraints;
    if (approval.value) changes.approval = { sql: approval.value };
    submit.disabled = true;
    error.hidden = true;
    try {
      const started = await ui.api(ui.jobUrl(v.id, '/fork'), { method: 'POST', body: { from_step: point, changes } });
      onDone(started.id);
    } catch (err) {
      error.replaceChildren(ui.errorBox(err));
      error.hidden = false;
      submit.disabled = false;
    }
  });
  return form;
}

/** The fork card of a finished job: where it came from, its forks, and "Re-run from here" on each step. */
export function renderFork(ui, v) {
  const { h } = ui;
  const agent = v.mode === 'agent';
  const lines = [];
  if (v.forked_from) {
    lines.push(
      h(
        'p',
        { id: 'forked-from' },
        'Forked from job ',
        h('a', { href: `#job=${v.forked_from.job}` }, h('code', {}, v.forked_from.job)),
        ` at ${v.forked_from.step}. `,
        compareButton(ui, v.forked_from.job, v.id, 'Compare with the origin'),
      ),
    );
  }
  if (v.forks && v.forks.length) {
    lines.push(
      h(
        'ul',
        { id: 'fork-list', 'aria-label': 'Forks of this job' },
        v.forks.map((f) => h('li', {}, h('a', { href: `#job=${f.job}` }, h('code', {}, f.job)), ` from ${f.step} `, compareButton(ui, v.id, f.job, 'Compare'))),
      ),
    );
  }
  const compare = h('div', { class: 'fork-compare', id: 'fork-compare' });
  const rows = [];
  const seen = new Set();
  // One form at a time: the editors' ids are the page's edit-<field> ids.
  let openSlot = null;
  for (const step of v.steps) {
    const point = forkPoint(step, agent);
    // A run's node that never started (not on the path taken) is no fork point.
    if (!point || seen.has(point) || step.state === 'pending' || (v.run && !step.started_at)) continue;
    seen.add(point);
    const slot = h('div', { class: 'fork-slot' });
    const open = h(
      'button',
      { type: 'button', class: 'quiet small', dataset: { forkPoint: point }, 'aria-expanded': 'false' },
      'Re-run from here',
    );
    open.addEventListener('click', async () => {
      // The form is drawn from the catalog (a step kind's, a node kind's editable fields): wait for it once.
      await ui.loadCatalog();
      const opening = !slot.firstChild;
      if (openSlot && openSlot !== slot) {
        openSlot.replaceChildren();
        openSlot.previousSibling.setAttribute('aria-expanded', 'false');
      }
      slot.replaceChildren(...(opening ? [forkForm(ui, v, step, agent, (id) => { location.hash = `job=${id}`; })] : []));
      open.setAttribute('aria-expanded', String(opening));
      openSlot = opening ? slot : null;
    });
    rows.push(h('li', { class: 'fork-step' }, h('span', {}, h('code', {}, point), ` ${step.title || step.kind}`, step.carried_over ? ' (carried over)' : ''), open, slot));
  }
  return ui.section(
    'Fork',
    'fork-title',
    lines,
    h('p', { class: 'muted small' }, 'Re-run this job from a step with a change: the steps before it are carried over, not run again.'),
    h('ul', { class: 'fork-steps', id: 'fork-steps' }, rows),
    compare,
  );
  function compareButton(helpers, a, b, label) {
    const button = helpers.h('button', { type: 'button', class: 'quiet small', dataset: { compare: `${a}/${b}` } }, label);
    button.addEventListener('click', async () => {
      try {
        const diff = await helpers.api(helpers.jobUrl(a, `/compare/${encodeURIComponent(b)}`));
        compare.replaceChildren(renderCompare(helpers, diff));
      } catch (err) {
        compare.replaceChildren(helpers.errorBox(err));
      }
    });
    return button;
  }
}

/** Two jobs side by side: the answers with the claims each one has alone marked, SQL, citations, usage, duration. */
export function renderCompare(ui, diff) {
  const { h, fmtNumber, fmtMs } = ui;
  const claims = (text, mine, cls) =>
    String(text || '')
      .split(/(?<=[.!?])\s+|\n+/)
      .filter((c) => c.trim())
      .map((c) => h('span', { class: mine.includes(c.trim()) ? `claim ${cls}` : 'claim' }, `${c.trim()} `));
  const answers = h(
    'div',
    { class: 'compare-answers' },
    h('div', { class: 'compare-side', dataset: { side: 'a' } }, h('h4', {}, 'A ', h('code', {}, diff.a.id)), claims(diff.answer.a, diff.answer.claims_dropped, 'dropped')),
    h('div', { class: 'compare-side', dataset: { side: 'b' } }, h('h4', {}, 'B ', h('code', {}, diff.b.id)), claims(diff.answer.b, diff.answer.claims_added, 'added')),
  );
  const sql = diff.sql.map((s) =>
    h(
      'tr',
      { dataset: { step: s.step } },
      h('th', { scope: 'row' }, s.step, s.carried_over ? ' (carried over)' : ''),
      h('td', {}, s.same_sql ? 'same SQL' : 'SQL changed'),
      h('td', { class: 'num' }, `${s.rows.a ?? '—'} → ${s.rows.b ?? '—'}`),
      h('td', { class: 'num' }, `+${s.rows.added} −${s.rows.removed}`),
    ),
  );
  const usage = diff.usage.total;
  return h(
    'div',
    { class: 'compare', id: 'compare-result' },
    answers,
    h('p', { id: 'compare-citations' }, `Citations added: ${diff.citations.added.join(', ') || 'none'}; dropped: ${diff.citations.dropped.join(', ') || 'none'}.`),
    sql.length ? h('table', { class: 'compare-sql' }, h('thead', {}, h('tr', {}, ['Step', 'SQL', 'Rows', 'Changed'].map((t) => h('th', { scope: 'col' }, t)))), h('tbody', {}, sql)) : null,
    h(
      'p',
      { id: 'compare-usage' },
      `Tokens ${fmtNumber(usage.a.total_tokens)} → ${fmtNumber(usage.b.total_tokens)}; carried over by B: ${fmtNumber(diff.usage.carried_over.b.total_tokens)}; `,
      `duration ${diff.duration_ms.a != null ? fmtMs(diff.duration_ms.a) : '—'} → ${diff.duration_ms.b != null ? fmtMs(diff.duration_ms.b) : '—'}.`,
    ),
  );
}

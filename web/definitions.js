// Console pages for agents, workflows and teams: list, forms (one per node), versions, archive, JSON
// import/export, the workflow graph, and starting a run (followed in the job view, #job=<id>).
// The form edits one draft object (the definition's JSON); the server validates on save and every problem
// it reports ({path, code, message, node}) is shown at the field its path names.

import { api, h, errorBox, loadCatalog } from './app.js';
import { edgeFields, renderGraph } from './graph.js';
import { createBuilder, removeNode } from './builder.js';

const KINDS = { agents: 'agent', workflows: 'workflow', teams: 'team' };
const TITLES = { agents: 'Agents', workflows: 'Workflows', teams: 'Teams' };
// The node kinds and the step kinds with their input fields come from the server's catalog (GET /api/catalog):
// a kind the server adds shows up here without a change to this file.
const known = { nodeKinds: [], nodeSchemas: {}, nodeDefs: {}, edgeNames: {}, stepKinds: [], stepFields: {}, inputTypes: [], strategies: [], providers: [], teamSchema: null, references: null };

/** Read the node and step kinds from the catalog (once it loads; the forms are drawn after). */
async function loadKinds() {
  const catalog = await loadCatalog();
  if (!catalog) return;
  known.nodeKinds = catalog.node_kinds.map((n) => n.kind);
  // Each node kind's JSON schema (a "$ref" into the shared "$defs"): a kind with no form of its own is drawn from it.
  known.nodeDefs = { ...((catalog.node_schema && catalog.node_schema.$defs) || {}), ...((catalog.team_schema && catalog.team_schema.$defs) || {}) };
  known.teamSchema = catalog.team_schema || null;
  known.nodeSchemas = Object.fromEntries(catalog.node_kinds.map((n) => [n.kind, resolveRef(n.schema)]));
  known.edgeNames = Object.fromEntries(catalog.node_kinds.map((n) => [n.kind, (n.edges || []).map((e) => e.field)]));
  // A step node runs an executor: the kinds the orchestrator works itself (a question, an agent) are nodes of their own.
  const steps = catalog.step_kinds.filter((k) => !k.orchestrated);
  known.stepKinds = steps.map((k) => k.kind);
  known.stepFields = Object.fromEntries(steps.map((k) => [k.kind, Object.keys(k.input_schema.properties || {})]));
  // The forms' closed choices, from the server's models (condition operators, input types, team strategies).
  const choices = catalog.definitions || {};
  known.inputTypes = choices.input_types || [];
  known.strategies = choices.team_strategies || [];
  known.providers = choices.providers || [];
  // How a definition refers to a node (the server's syntax): what renaming a node rewrites.
  known.references = catalog.references || null;
}
// How a mapped value is given: a reference (input.x, node.field), a text with {references}, or a literal.
const MAPPING_SHAPES = [['from', 'from'], ['template', 'template'], ['value', 'value']];
const ROUTE = /^#(agents|workflows|teams)(?::(new)|\/([a-z][a-z0-9-]{0,62}))?$/;

const ui = {
  plural: null,
  id: null, // null: a new definition
  version: null,
  latest: null,
  versions: [],
  saved: null, // the definition of the version shown, as the server gave it
  draft: null,
  badJson: new Set(),
  refs: { agents: [], workflows: [], models: [], subInputs: {} },
  flash: null,
  load: 0,
  els: {},
};

const $ = (selector, root = document) => root.querySelector(selector);
const clone = (value) => JSON.parse(JSON.stringify(value));
let fieldSeq = 0;

// ----- the draft: read and write by JSON path ("nodes.2.input.prompt") ----------------------------

function getPath(obj, path) {
  return path.split('.').reduce((o, k) => (o === undefined || o === null ? undefined : o[k]), obj);
}

/** Set a value at a path (creating objects on the way); undefined removes the key. */
function setPath(obj, path, value) {
  const keys = path.split('.');
  let o = obj;
  for (const k of keys.slice(0, -1)) {
    if (o[k] === undefined || o[k] === null || typeof o[k] !== 'object') o[k] = {};
    o = o[k];
  }
  const last = keys[keys.length - 1];
  if (value !== undefined) {
    o[last] = value;
    return;
  }
  delete o[last];
  // A cleared field leaves no empty object behind ("until": {} would be a half-made condition).
  for (let n = keys.length - 1; n > 0; n -= 1) {
    const parent = n > 1 ? getPath(obj, keys.slice(0, n - 1).join('.')) : obj;
    const child = parent[keys[n - 1]];
    if (!child || typeof child !== 'object' || Array.isArray(child) || Object.keys(child).length) break;
    delete parent[keys[n - 1]];
  }
}

/** A dict with one key renamed, in place of the old one (order kept). */
function renameKey(dict, from, to) {
  return Object.fromEntries(Object.entries(dict).map(([k, v]) => [k === from ? to : k, v]));
}

/** Text → value: JSON when it parses ("5", "true", "[1]"), else the text itself. */
function looseValue(text) {
  if (text.trim() === '') return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** JSON text with the keys of every object sorted: two drafts that differ only in key order compare equal. */
function canonical(value) {
  return JSON.stringify(value, (_, v) => (v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : v));
}

function showValue(value) {
  if (value === undefined || value === null) return value === null ? 'null' : '';
  return typeof value === 'string' ? value : JSON.stringify(value);
}

// ----- fields -------------------------------------------------------------------------------------

const READERS = {
  text: (el) => (el.value === '' ? undefined : el.value),
  textarea: (el) => (el.value === '' ? undefined : el.value),
  int: (el) => (el.value.trim() === '' ? undefined : Number(el.value)),
  number: (el) => (el.value.trim() === '' ? undefined : Number(el.value)),
  list: (el) => {
    const items = el.value.split(/[\s,]+/).filter(Boolean);
    return items.length ? items : undefined;
  },
  select: (el) => (el.value === '' ? undefined : el.value),
  bool: (el) => (el.checked ? true : undefined),
  any: (el) => looseValue(el.value),
};

function control(type, id, value, opts) {
  if (type === 'textarea' || type === 'json') {
    const text = type === 'json' ? (value === undefined ? '' : JSON.stringify(value, null, 2)) : value ?? '';
    return h('textarea', { id, rows: opts.rows || 3, class: type === 'json' ? 'code' : null, spellcheck: type === 'json' ? 'false' : null, value: text });
  }
  if (type === 'select') {
    const el = h('select', { id }, (opts.options || []).map(([v, label]) => h('option', { value: v }, label)));
    el.value = value ?? '';
    return el;
  }
  if (type === 'bool') return h('input', { id, type: 'checkbox', checked: value === true });
  const attrs = { id, type: type === 'int' || type === 'number' ? 'number' : 'text', list: opts.list, placeholder: opts.placeholder, spellcheck: 'false', autocomplete: 'off' };
  if (type === 'int') attrs.step = '1';
  if (type === 'number') attrs.step = 'any';
  const text = type === 'list' ? (value || []).join(', ') : type === 'any' ? showValue(value) : value ?? '';
  return h('input', { ...attrs, value: text });
}

/**
 * One labelled field bound to `path` in the draft. Options: type (text, textarea, int, number, list, select,
 * bool, json, any), options ([value, label] for select), hint, list (a datalist id), rows, onChange
 * (called on "change" after the draft is updated, e.g. to re-render a form whose shape depends on the value).
 */
function field(label, path, opts = {}) {
  const type = opts.type || 'text';
  const id = `df-${(fieldSeq += 1)}`;
  const el = control(type, id, getPath(ui.draft, path), opts);
  el.dataset.path = path;
  const errorId = `${id}-error`;
  const error = h('span', { class: 'field-error', id: errorId, role: 'alert', hidden: true });
  const hint = opts.hint ? h('span', { class: 'muted small', id: `${id}-hint` }, opts.hint) : null;
  if (hint) el.setAttribute('aria-describedby', `${id}-hint`);
  const update = () => {
    if (type === 'json') {
      try {
        setPath(ui.draft, path, el.value.trim() === '' ? undefined : JSON.parse(el.value));
        ui.badJson.delete(path);
        setFieldError(el, null);
      } catch (err) {
        ui.badJson.add(path);
        setFieldError(el, `Not valid JSON: ${err.message}`);
        return;
      }
    } else setPath(ui.draft, path, opts.parse ? opts.parse(el.value) : READERS[type](el));
    changed();
  };
  el.addEventListener(type === 'select' || type === 'bool' ? 'change' : 'input', update);
  if (opts.onChange) el.addEventListener('change', () => opts.onChange(el));
  const wrap = h('div', { class: type === 'bool' ? 'field field-check' : 'field', dataset: { field: path } });
  if (type === 'bool') append(wrap, h('label', { for: id }, el, ' ', label));
  else append(wrap, h('label', { for: id }, label), el);
  return append(wrap, hint, error);
}

function append(el, ...children) {
  for (const c of children.flat()) if (c) el.append(c);
  return el;
}

function setFieldError(el, message) {
  const wrap = el.closest('[data-field]');
  const error = wrap ? $('.field-error', wrap) : null;
  if (!message) {
    el.removeAttribute('aria-invalid');
    if (error) {
      error.textContent = '';
      error.hidden = true;
    }
    return;
  }
  el.setAttribute('aria-invalid', 'true');
  if (error) {
    error.textContent = error.hidden || !error.textContent ? message : `${error.textContent} ${message}`;
    error.hidden = false;
    el.setAttribute('aria-errormessage', error.id);
  }
}

/** A mapping (`{from}`, `{template}` or `{value}`) at `path`: its shape and its text. */
function mappingField(label, path, { onRemove, nameEl } = {}) {
  const current = getPath(ui.draft, path) || {};
  const shape = 'from' in current ? 'from' : 'value' in current ? 'value' : 'template';
  const id = `df-${(fieldSeq += 1)}`;
  const select = h('select', { 'aria-label': `${label}: given as` }, MAPPING_SHAPES.map(([v, l]) => h('option', { value: v }, l)));
  select.value = shape;
  const text = h('input', { id, type: 'text', spellcheck: 'false', autocomplete: 'off', value: shape === 'value' ? showValue(current.value) : current[shape] ?? '', dataset: { path } });
  const write = () => {
    const s = select.value;
    const raw = text.value;
    const value = s === 'value' ? { value: looseValue(raw) ?? '' } : { [s]: raw };
    setPath(ui.draft, path, value);
    changed();
  };
  select.addEventListener('change', write);
  text.addEventListener('input', write);
  const error = h('span', { class: 'field-error', id: `${id}-error`, role: 'alert', hidden: true });
  const row = h('div', { class: 'mapping-row' }, nameEl || null, select, text);
  if (onRemove) row.append(h('button', { type: 'button', class: 'quiet', 'aria-label': `Remove ${label}`, on: { click: onRemove } }, '✕'));
  return h('div', { class: 'field', dataset: { field: path } }, nameEl ? null : h('label', { for: id }, label), row, error);
}

/** A dict of named mappings (a node's inputs, a workflow's outputs), with add / rename / remove. */
function mappingsField(title, path, suggested = []) {
  const dict = getPath(ui.draft, path) || {};
  const listId = `df-names-${(fieldSeq += 1)}`;
  const box = h('div', { class: 'mappings', dataset: { field: path } }, h('div', { class: 'mappings-head' }, h('strong', {}, title)), h('datalist', { id: listId }, suggested.map((s) => h('option', { value: s }))));
  for (const name of Object.keys(dict)) {
    const nameEl = h('input', { type: 'text', class: 'mapping-name', value: name, list: listId, 'aria-label': `${title}: name`, spellcheck: 'false' });
    nameEl.addEventListener('change', () => {
      const to = nameEl.value.trim();
      if (!to || to === name || to in dict) {
        nameEl.value = name;
        return;
      }
      setPath(ui.draft, path, renameKey(getPath(ui.draft, path), name, to));
      rerender();
    });
    const remove = () => {
      const next = { ...getPath(ui.draft, path) };
      delete next[name];
      setPath(ui.draft, path, next);
      rerender();
    };
    box.append(mappingField(`${title} ${name}`, `${path}.${name}`, { onRemove: remove, nameEl }));
  }
  const add = () => {
    const next = { ...(getPath(ui.draft, path) || {}) };
    const free = suggested.find((s) => !(s in next));
    let name = free || 'value';
    for (let i = 2; name in next; i += 1) name = `value${i}`;
    next[name] = { template: '' };
    setPath(ui.draft, path, next);
    rerender();
  };
  box.append(h('button', { type: 'button', class: 'quiet', on: { click: add } }, `Add ${title.toLowerCase()}`));
  if (!Object.keys(dict).length) box.append(h('p', { class: 'muted small' }, 'None.'));
  return box;
}

function group(title, ...children) {
  return h('fieldset', { class: 'defs-group' }, h('legend', {}, title), children);
}

function row(...children) {
  return h('div', { class: 'field-row' }, children);
}

// ----- the forms ----------------------------------------------------------------------------------

function commonFields() {
  const isNew = !ui.id;
  const id = field('Id', 'id', { hint: 'Lower-case letters, digits and dashes; used in URLs and references.' });
  if (!isNew) $('input', id).readOnly = true;
  return [id, field('Name', 'name'), field('Description', 'description', { type: 'textarea', rows: 2 })];
}

function agentForm() {
  return [
    ...commonFields(),
    field('Instructions', 'instructions', { type: 'textarea', rows: 6, hint: 'The system prompt.' }),
    group(
      'Model',
      row(
        field('Provider', 'model.provider', { type: 'select', options: [['', "The app's provider"], ...known.providers.map((p) => [p, p])] }),
        field('Model or deployment', 'model.model', { list: 'df-models', hint: 'Suggestions: the models of the configured providers.' }),
      ),
      field('Fallback models', 'model.fallbacks', { type: 'list', hint: 'Tried in order, separated by commas.' }),
    ),
    field('Tools', 'tools', { type: 'list', hint: 'Step kinds (consult_rag, execute_azure_sql, generate_response) and family tools (function.growth_rate), separated by commas.' }),
    group(
      'Constraints and limits',
      row(
        field('Max tokens', 'constraints.max_tokens', { type: 'int', placeholder: '1024' }),
        field('Temperature', 'constraints.temperature', { type: 'number', placeholder: '0' }),
        field('Timeout (ms)', 'constraints.timeout_ms', { type: 'int', placeholder: '60000' }),
      ),
      row(
        field('Token budget', 'constraints.budget.max_total_tokens', { type: 'int', placeholder: 'No limit' }),
        field('Max turns', 'limits.max_turns', { type: 'int' }),
        field('Max tool calls', 'limits.max_tool_calls', { type: 'int' }),
      ),
    ),
    field('Output schema (JSON Schema)', 'output_schema', { type: 'json', rows: 5, hint: 'Optional; an object schema. Without one the output is {text}.' }),
  ];
}

/** Each team strategy's schema by its "type" (the catalog's team schema: a union told apart by "type"). */
function strategyVariants() {
  const prop = ((known.teamSchema && known.teamSchema.properties) || {}).strategy || {};
  const out = {};
  for (const alt of prop.oneOf || prop.anyOf || []) {
    const variant = resolveRef(alt);
    const type = ((variant.properties || {}).type || {}).const;
    if (type !== undefined) out[type] = variant;
  }
  return out;
}

function teamForm() {
  const variants = strategyVariants();
  const type = getPath(ui.draft, 'strategy.type') || known.strategies[0] || '';
  // Another strategy: the fields its schema requires, keeping the values of fields the two share.
  const setType = (el) => {
    const t = el.value || known.strategies[0];
    const old = ui.draft.strategy || {};
    const variant = variants[t] || {};
    const kept = Object.fromEntries(Object.entries(old).filter(([k]) => k !== 'type' && k in (variant.properties || {})));
    ui.draft.strategy = { type: t, ...schemaStarter(variant, ['type']), ...kept };
    rerender();
  };
  const looks = { aggregator: { label: 'Aggregator agent', list: 'df-agents' }, supervisor: { label: 'Supervisor agent', list: 'df-agents' }, max_rounds: { label: 'Max rounds' } };
  const strategy = [
    field('Strategy', 'strategy.type', { type: 'select', options: known.strategies.map((s) => [s, s]), onChange: setType }),
    ...schemaFields(variants[type], 'strategy', ['type'], looks),
  ];
  return [...commonFields(), field('Member agents', 'agents', { type: 'list', hint: 'Agent ids, in order, separated by commas.' }), group('Coordination', ...strategy)];
}

function workflowForm() {
  const inputs = ui.draft.inputs || {};
  const inputsBox = group('Inputs');
  for (const name of Object.keys(inputs)) inputsBox.append(inputRow(name));
  inputsBox.append(
    h('button', {
      type: 'button',
      class: 'quiet',
      on: {
        click: () => {
          const next = { ...(ui.draft.inputs || {}) };
          let name = 'input1';
          for (let i = 2; name in next; i += 1) name = `input${i}`;
          next[name] = { type: 'string' };
          ui.draft.inputs = next;
          rerender();
        },
      },
    }, 'Add workflow input'),
  );
  const nodes = h('div', { class: 'node-list' }, (ui.draft.nodes || []).map((node, i) => nodeCard(node, i)));
  const addKind = h('select', { 'aria-label': 'Kind of the new node' }, known.nodeKinds.map((k) => h('option', { value: k }, k)));
  const addNode = () => {
    ui.draft.nodes = [...(ui.draft.nodes || []), newNode(addKind.value, freeNodeId(addKind.value))];
    rerender();
  };
  return [
    ...commonFields(),
    inputsBox,
    field('Start node', 'start', { list: 'df-node-ids', placeholder: 'the first node' }),
    h('div', { class: 'nodes-head' }, h('h3', {}, 'Nodes'), h('div', { class: 'card-tools' }, addKind, h('button', { type: 'button', on: { click: addNode } }, 'Add node'))),
    nodes,
    group('Outputs', mappingsField('Output', 'outputs')),
  ];
}

function inputRow(name) {
  const base = `inputs.${name}`;
  const nameEl = h('input', { type: 'text', value: name, spellcheck: 'false', 'aria-label': `Input ${name}: name` });
  nameEl.addEventListener('change', () => {
    const to = nameEl.value.trim();
    if (!to || to === name || to in ui.draft.inputs) {
      nameEl.value = name;
      return;
    }
    ui.draft.inputs = renameKey(ui.draft.inputs, name, to);
    rerender();
  });
  const remove = () => {
    delete ui.draft.inputs[name];
    rerender();
  };
  return h(
    'div',
    { class: 'input-spec', dataset: { field: base } },
    h('div', { class: 'input-spec-head' }, nameEl, h('button', { type: 'button', class: 'quiet', 'aria-label': `Remove input ${name}`, on: { click: remove } }, '✕')),
    row(
      field(`Type of ${name}`, `${base}.type`, { type: 'select', options: known.inputTypes.map((t) => [t, t]) }),
      field(`Default of ${name}`, `${base}.default`, { type: 'any', placeholder: 'none' }),
    ),
    field(`Required: ${name}`, `${base}.required`, { type: 'select', options: [['', 'required'], ['false', 'optional']], parse: (v) => (v === 'false' ? false : undefined) }),
    field(`Description of ${name}`, `${base}.description`),
  );
}

function freeNodeId(kind) {
  const taken = new Set((ui.draft.nodes || []).map((n) => n.id));
  let id = kind;
  for (let i = 2; taken.has(id); i += 1) id = `${kind}${i}`;
  return id;
}

/**
 * A node of `kind` with the fields its schema requires, each at its default or an empty value of its type; for the
 * kinds the console knows, a first suggestion on top (an agent it lists, a prompt input, the approval's answers).
 */
function newNode(kind, id, keep = {}) {
  const base = { id, kind, ...(keep.title ? { title: keep.title } : {}), ...(keep.after && keep.after.length ? { after: keep.after } : {}) };
  const suggested = {
    agent: { agent: ui.refs.agents[0] || '', input: { prompt: { template: '' } } },
    step: { step: known.stepKinds[0] || '' },
    human: { options: ['approve', 'reject'] },
  }[kind];
  return { ...base, ...schemaStarter(known.nodeSchemas[kind], ['id', 'kind', 'title', 'after']), ...suggested };
}

// ----- a node kind's form from its JSON schema (the catalog's), for the field types the models use ----------

const MAPPING_DEFS = ['Ref', 'Value', 'Template'];

/** The schema a local "$ref" names ("#/$defs/X", into the catalog's node schema), or the schema itself. */
function resolveRef(schema) {
  const ref = schema && schema.$ref;
  if (typeof ref !== 'string') return schema || {};
  const name = ref.startsWith('#/$defs/') ? ref.slice('#/$defs/'.length) : null;
  return (name && known.nodeDefs[name]) || {};
}

/** A property's schema without its "null" alternative (an optional field), resolved. */
function nonNull(prop) {
  const alts = (prop.anyOf || []).filter((p) => p.type !== 'null');
  return resolveRef(alts.length === 1 ? alts[0] : prop);
}

/** Whether a schema is one mapped value ({from} / {value} / {template}). */
function isMapping(prop) {
  const alts = prop.oneOf || prop.anyOf || [];
  return alts.length > 0 && alts.every((a) => typeof a.$ref === 'string' && MAPPING_DEFS.some((d) => a.$ref.endsWith(`/${d}`)));
}

/** The JSON value a new node starts with for a schema: its default, or an empty value of its type. */
function starterValue(prop) {
  if (prop.default !== undefined) return clone(prop.default);
  const p = nonNull(prop);
  if (isMapping(p)) return { template: '' };
  if (Array.isArray(p.enum) && p.enum.length) return p.enum[0];
  if (p.type === 'array') return [];
  if (p.type === 'object') return p.properties ? schemaStarter(p) : {};
  if (p.type === 'integer' || p.type === 'number') return p.minimum ?? 0;
  if (p.type === 'boolean') return false;
  return '';
}

/** An object with a schema's required properties (those not in `skip`), each at its starter value. */
function schemaStarter(schema, skip = []) {
  const out = {};
  const props = (schema && schema.properties) || {};
  for (const name of (schema && schema.required) || []) if (!skip.includes(name) && props[name]) out[name] = starterValue(props[name]);
  return out;
}

/**
 * The form fields of an object schema's properties (those not in `skip`), bound under `base`. `look` gives, by a
 * property's dotted name under the node, how the console presents it (a label, a hint, a list of suggestions): the
 * fields themselves, their types and their choices are the schema's, so a field the server adds shows up here.
 */
function schemaFields(schema, base, skip = [], look = {}, prefix = '') {
  const out = [];
  for (const [name, prop] of Object.entries((schema && schema.properties) || {})) {
    if (skip.includes(name)) continue;
    const el = schemaField(name, prop, `${base}.${name}`, look, `${prefix}${name}`);
    if (el) out.push(el);
  }
  return out;
}

/** One property as a form field, by its JSON type: text, number, yes/no, a choice, a list, a mapped value, or any JSON. */
function schemaField(name, prop, path, look = {}, key = name) {
  const shown = look[key] || {};
  const label = shown.label || prop.title || name;
  const p = nonNull(prop);
  const hint = shown.hint || p.description || prop.description;
  const placeholder = shown.placeholder || (prop.default !== undefined && prop.default !== null ? String(prop.default) : undefined);
  const opts = { hint, placeholder, list: shown.list, onChange: shown.onChange };
  if (isMapping(p)) return mappingField(label, path);
  if (p.type === 'object' && p.patternProperties && Object.values(p.patternProperties).every(isMapping)) return mappingsField(label, path, shown.suggested || []);
  if (p.type === 'object' && p.properties) return group(label, ...schemaFields(p, path, [], look, `${key}.`));
  if (Array.isArray(p.enum) || shown.choices) {
    const values = shown.choices || p.enum;
    const first = prop.default === undefined ? [['', '—']] : [];
    return field(label, path, { ...opts, type: 'select', options: [...first, ...values.map((v) => [String(v), String(v)])] });
  }
  if (p.type === 'string') return field(label, path, { ...opts, type: (p.maxLength || 0) > 500 ? 'textarea' : 'text' });
  if (p.type === 'integer') return field(label, path, { ...opts, type: 'int' });
  if (p.type === 'number') return field(label, path, { ...opts, type: 'number' });
  if (p.type === 'boolean') return field(label, path, { ...opts, type: 'bool' });
  if (p.type === 'array' && (p.items || {}).type === 'string') return field(label, path, { ...opts, type: 'list', hint: hint || 'Separated by commas.' });
  if (p.type === 'array' || p.type === 'object') return field(label, path, { ...opts, type: 'json', rows: 3 });
  return field(label, path, { ...opts, type: 'any' });
}

/**
 * Rename a node everywhere the workflow names it: its kind's edge fields, the start, and the references in
 * mappings and conditions. Which fields hold node ids, which hold a reference or a template, and how a reference
 * names its node are the server's (the catalog's node kinds and `references`); nothing here parses its syntax.
 */
function renameNode(draft, from, to, references) {
  const swap = (list) => (Array.isArray(list) ? list.map((x) => (x === from ? to : x)) : list);
  const refs = references || { fields: [], template_fields: [], separator: '.', template_pattern: '(?!)' };
  // A reference names node `from` when its head (the text before the first separator) is that id.
  const renamed = (ref) => {
    const cut = ref.indexOf(refs.separator);
    const head = cut < 0 ? ref : ref.slice(0, cut);
    return head === from ? to + ref.slice(head.length) : ref;
  };
  // A template's references are each match's group 1 (spaces around it kept as they were).
  const inTemplate = (text) =>
    text.replace(new RegExp(refs.template_pattern, 'g'), (match, ref) => {
      const start = match.indexOf(ref);
      const core = ref.trim();
      const lead = ref.slice(0, ref.indexOf(core));
      return match.slice(0, start) + lead + renamed(core) + ref.slice(lead.length + core.length) + match.slice(start + ref.length);
    });
  const walk = (value) => {
    if (Array.isArray(value)) return value.map(walk);
    if (!value || typeof value !== 'object') return value;
    const out = {};
    for (const [k, v] of Object.entries(value)) {
      if (refs.fields.includes(k) && typeof v === 'string') out[k] = renamed(v);
      else if (refs.template_fields.includes(k) && typeof v === 'string') out[k] = inTemplate(v);
      else out[k] = walk(v);
    }
    return out;
  };
  const nodes = walk(draft.nodes || []).map((node) => {
    if (!node || typeof node !== 'object') return node;
    for (const { field } of edgeFields(node.kind)) if (field in node) node[field] = swap(node[field]);
    return node;
  });
  draft.nodes = nodes;
  if (draft.outputs !== undefined) draft.outputs = walk(draft.outputs);
  if (draft.start === from) draft.start = to;
}

// How the console presents some fields of the node kinds it knows (labels, hints, suggestions): presentation only.
// Which fields a kind has, their types, limits and choices come from its schema in the catalog.
function fieldLooks(node) {
  const ids = { hint: 'Node ids, separated by commas.' };
  return {
    agent: { agent: { list: 'df-agents' }, version: { label: 'Agent version', placeholder: 'latest' }, input: { suggested: ['prompt'] } },
    step: { step: { label: 'Step kind', choices: known.stepKinds, onChange: rerender }, input: { suggested: known.stepFields[node.step] || [] } },
    tool: { tool: { placeholder: 'function.growth_rate' } },
    human: {
      options: { hint: 'With approve and reject it is an approval.' },
      free_text: { label: 'Free-text answer' },
      timeout_seconds: { label: 'Timeout (seconds)' },
    },
    condition: {
      if: { label: 'If' },
      'if.left': { label: 'If value', placeholder: 'analyse.score' },
      'if.op': { label: 'Operator' },
      'if.right': { label: 'Compared with' },
      then: { label: 'Then nodes', ...ids },
      else: { label: 'Else nodes', ...ids },
    },
    parallel: { branches: { hint: 'Node ids started at once.' } },
    join: { wait: { label: 'Wait for' }, on_failure: { label: 'On failure' } },
    workflow: {
      workflow: { label: 'Sub-workflow', list: 'df-workflows', onChange: () => loadSubInputs([node.workflow]) },
      version: { label: 'Workflow version', placeholder: 'latest' },
      input: { suggested: ui.refs.subInputs[node.workflow] || [] },
    },
    loop: {
      body: { label: 'Body nodes', hint: 'Run in order each iteration.' },
      max_iterations: { label: 'Max iterations' },
      until: { label: 'Until' },
      'until.left': { label: 'Until value', placeholder: 'optional' },
      'until.op': { label: 'Until operator' },
      'until.right': { label: 'Until compared with' },
    },
  }[node.kind] || {};
}

/**
 * A node's own fields, drawn from its kind's JSON schema in the catalog (every kind, the ones the server adds too):
 * the edge fields the schema does not describe as lists of node ids, then each property of the schema.
 */
function kindFields(node, base) {
  const schema = known.nodeSchemas[node.kind] || {};
  const props = schema.properties || {};
  const common = ['id', 'kind', 'title', 'after'];
  const bare = edgeFields(node.kind).filter((f) => !common.includes(f.field) && !(f.field in props));
  return [
    ...bare.map((f) => field(`${f.label} nodes`, `${base}.${f.field}`, { type: 'list', hint: 'Node ids, separated by commas.' })),
    ...schemaFields(schema, base, common, fieldLooks(node)),
  ];
}

function nodeCard(node, index) {
  const base = `nodes.${index}`;
  const move = (delta) => {
    const nodes = ui.draft.nodes;
    const to = index + delta;
    if (to < 0 || to >= nodes.length) return;
    [nodes[index], nodes[to]] = [nodes[to], nodes[index]];
    rerender();
  };
  // The same removal as the graph's: edges of other nodes that name this one go with it (unless another
  // node still has this id, while ids are being edited: then only this card goes).
  const remove = () => {
    const twin = ui.draft.nodes.some((n, i) => i !== index && n && n.id === node.id);
    if (twin) ui.draft.nodes = ui.draft.nodes.filter((_, i) => i !== index);
    else removeNode(ui.draft, node.id);
    rerender();
  };
  const idField = field('Node id', `${base}.id`);
  // The id input must not rename on every keystroke: only the "change" above does.
  const idInput = $('input', idField);
  idInput.replaceWith(idInput.cloneNode(true));
  $('input', idField).addEventListener('change', (ev) => {
    const to = ev.target.value.trim();
    if (!to || to === node.id) return;
    renameNode(ui.draft, node.id, to, known.references);
    setPath(ui.draft, `${base}.id`, to);
    rerender();
  });
  const kindField = field('Kind', `${base}.kind`, {
    type: 'select',
    options: known.nodeKinds.map((k) => [k, k]),
    onChange: (el) => {
      ui.draft.nodes[index] = newNode(el.value, node.id, node);
      rerender();
    },
  });
  return h(
    'fieldset',
    { class: `node-card node-${node.kind}`, dataset: { nodeCard: node.id, path: base } },
    h('legend', {}, h('span', { class: `kind-chip g-kind-${node.kind}` }, node.kind), ' ', node.id),
    h('div', { class: 'node-errors field-error', role: 'alert', hidden: true }),
    row(idField, kindField, field('Title', `${base}.title`)),
    field('After', `${base}.after`, { type: 'list', hint: 'Nodes that must finish first (several: fan-in).' }),
    kindFields(node, base),
    h(
      'div',
      { class: 'actions node-actions' },
      h('button', { type: 'button', class: 'quiet', on: { click: () => move(-1) }, 'aria-label': `Move ${node.id} up` }, '↑'),
      h('button', { type: 'button', class: 'quiet', on: { click: () => move(1) }, 'aria-label': `Move ${node.id} down` }, '↓'),
      h('button', { type: 'button', class: 'danger-outline', on: { click: remove } }, `Remove ${node.id}`),
    ),
  );
}

const FORMS = { agents: agentForm, workflows: workflowForm, teams: teamForm };

function datalists() {
  const nodeIds = (ui.draft.nodes || []).map((n) => n && n.id).filter(Boolean);
  return [
    h('datalist', { id: 'df-agents' }, ui.refs.agents.map((id) => h('option', { value: id }))),
    h('datalist', { id: 'df-workflows' }, ui.refs.workflows.map((id) => h('option', { value: id }))),
    h('datalist', { id: 'df-models' }, ui.refs.models.map((id) => h('option', { value: id }))),
    h('datalist', { id: 'df-node-ids' }, nodeIds.map((id) => h('option', { value: id }))),
  ];
}

/** Build the form again from the draft (after a change of shape: a node added, a kind or name changed). */
function rerender() {
  const { form } = ui.els;
  if (!form) return;
  const scroll = window.scrollY;
  form.replaceChildren(...datalists(), ...FORMS[ui.plural]());
  window.scrollTo(0, scroll);
  changed();
}

/** After any edit: redraw the graph, refresh the node id list, and say whether the form differs from what is saved. */
function changed() {
  if (ui.els.dirty) ui.els.dirty.hidden = canonical(ui.draft) === canonical(ui.saved || emptyDraft(ui.plural));
  if (ui.plural === 'workflows' && ui.els.graph) {
    renderGraph(ui.els.graph, ui.draft, { invalid: ui.invalidNodes || new Set(), editable: true });
    ui.builder.afterRender();
  }
  const dl = document.getElementById('df-node-ids');
  if (dl && ui.draft.nodes) dl.replaceChildren(...ui.draft.nodes.map((n) => n && n.id).filter(Boolean).map((id) => h('option', { value: id })));
}

/** The drag-and-drop builder on the graph box: its edits go to the same draft, then the forms are redrawn. */
function workflowBuilder(graphBox) {
  const builder = createBuilder({
    nodeKinds: known.nodeKinds,
    getDraft: () => ui.draft,
    commit: (mutate) => {
      mutate(ui.draft);
      rerender();
    },
    replaceDraft: (definition) => {
      ui.draft = definition;
      rerender();
    },
    addNode: (kind) => {
      const id = freeNodeId(kind);
      ui.draft.nodes = [...(ui.draft.nodes || []), newNode(kind, id)];
      return id;
    },
    openNode: focusNode,
  });
  builder.attach(graphBox);
  graphBox.setAttribute('aria-describedby', 'df-builder-hint');
  return builder;
}

function focusNode(id) {
  const card = document.querySelector(`[data-node-card="${CSS.escape(id)}"]`);
  if (!card) return;
  card.scrollIntoView({ block: 'start' });
  const first = $('input, select, textarea', card);
  if (first) first.focus();
}

// ----- validation problems at their fields ----------------------------------------------------------

/** The element a problem's path names: the field itself, or the nearest enclosing one. */
function elementFor(issue) {
  const parts = String(issue.path || '').split('.').filter(Boolean);
  for (let n = parts.length; n > 0; n -= 1) {
    const path = parts.slice(0, n).join('.');
    const el = ui.els.form.querySelector(`[data-path="${CSS.escape(path)}"], [data-field="${CSS.escape(path)}"]`);
    if (el) return el;
  }
  if (issue.node) return ui.els.form.querySelector(`[data-node-card="${CSS.escape(issue.node)}"]`);
  return null;
}

function nodeOf(issue) {
  if (issue.node) return issue.node;
  const m = /^nodes\.(\d+)/.exec(issue.path || '');
  const node = m && ui.draft.nodes ? ui.draft.nodes[Number(m[1])] : null;
  return node ? node.id : null;
}

function clearIssues() {
  for (const el of ui.els.form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  for (const el of ui.els.form.querySelectorAll('.field-error')) {
    el.textContent = '';
    el.hidden = true;
  }
  ui.els.problems.replaceChildren();
  ui.els.problems.hidden = true;
  ui.invalidNodes = new Set();
}

function showIssues(err) {
  clearIssues();
  const issues = err.errors && err.errors.length ? err.errors : [{ path: err.field || '', code: err.code, message: err.message }];
  const list = h('ul', { class: 'problem-list' });
  for (const issue of issues) {
    const el = elementFor(issue);
    if (el) markAt(el, issue);
    const node = nodeOf(issue);
    if (node) ui.invalidNodes.add(node);
    const where = issue.path || '(definition)';
    const go = h('button', { type: 'button', class: 'linkish', on: { click: () => el && (el.matches('input, select, textarea') ? el : $('input, select, textarea', el) || el).focus() } }, where);
    list.append(h('li', { dataset: { path: issue.path || '', code: issue.code || '' } }, go, ': ', issue.message, ' ', h('code', {}, issue.code)));
  }
  ui.els.problems.replaceChildren(errorBox({ code: err.code, message: `${err.message}` }), list);
  ui.els.problems.hidden = false;
  changed();
}

function markAt(el, issue) {
  const text = `${issue.message} [${issue.code}]`;
  if (el.matches('input, select, textarea')) {
    setFieldError(el, text);
    return;
  }
  if (el.matches('[data-node-card]')) {
    const box = $('.node-errors', el);
    box.textContent = box.hidden ? text : `${box.textContent} ${text}`;
    box.hidden = false;
    el.setAttribute('aria-invalid', 'true');
    return;
  }
  const control = $('input, select, textarea', el);
  if (control && el.matches('[data-field]') && !el.matches('.mappings, .input-spec')) setFieldError(control, text);
  else {
    let box = $(':scope > .field-error', el);
    if (!box) {
      box = h('span', { class: 'field-error', role: 'alert' });
      el.append(box);
    }
    box.textContent = box.hidden || !box.textContent ? text : `${box.textContent} ${text}`;
    box.hidden = false;
    el.setAttribute('aria-invalid', 'true');
  }
}

// ----- loading, saving, archiving ------------------------------------------------------------------

function url(plural, id, query = '') {
  return `/api/${plural}${id ? `/${encodeURIComponent(id)}` : ''}${query}`;
}

async function loadRefs() {
  const quiet = (path) => api(path).catch(() => null);
  const [agents, workflows, models] = await Promise.all([quiet(url('agents')), quiet(url('workflows')), ui.plural === 'agents' ? quiet('/api/llm/models') : null]);
  ui.refs.agents = agents ? agents.agents.map((a) => a.id) : [];
  ui.refs.workflows = workflows ? workflows.workflows.map((w) => w.id) : [];
  ui.refs.subInputs = {};
  const providers = models && Array.isArray(models.providers) ? models.providers : [];
  ui.refs.models = [...new Set(providers.flatMap((p) => (Array.isArray(p.models) ? p.models.map((m) => m.id) : [])))];
}

/** The input names of sub-workflows (suggested for a workflow node's inputs); the form is redrawn when known. */
async function loadSubInputs(ids) {
  const wanted = [...new Set(ids)].filter((id) => id && ui.refs.workflows.includes(id) && !(id in ui.refs.subInputs));
  if (!wanted.length) return;
  const load = ui.load;
  const got = await Promise.all(wanted.map((id) => api(url('workflows', id)).catch(() => null)));
  got.forEach((view, i) => {
    ui.refs.subInputs[wanted[i]] = view ? Object.keys(view.definition.inputs || {}) : [];
  });
  if (load === ui.load) rerender();
}

function say(message) {
  ui.els.status.textContent = message;
}

function showError(err, title) {
  const box = ui.els.problems;
  box.replaceChildren(errorBox(err, { title }));
  box.hidden = false;
}

function takeView(view) {
  ui.id = view.id;
  ui.version = view.version;
  ui.latest = view.latest_version;
  ui.versions = view.versions || [];
  ui.saved = view.definition;
  ui.draft = clone(view.definition);
  ui.badJson.clear();
}

async function loadVersion(version) {
  const load = ++ui.load;
  try {
    const view = await api(url(ui.plural, ui.id, version ? `?version=${version}` : ''));
    if (load !== ui.load) return;
    takeView(view);
    renderEditorParts();
  } catch (err) {
    if (load === ui.load) showError(err, 'Could not load it:');
  }
}

/** POST a new definition; an import (upsert) of an id that exists saves a new version of it, as `apply` does. */
async function create(body, upsert) {
  try {
    return await api(url(ui.plural), { method: 'POST', body });
  } catch (err) {
    if (!upsert || err.code !== 'DEFINITION_EXISTS' || typeof body.id !== 'string') throw err;
    return api(url(ui.plural, body.id), { method: 'PUT', body });
  }
}

async function save({ upsert = false } = {}) {
  clearIssues();
  if (ui.badJson.size) {
    const path = [...ui.badJson][0];
    showIssues({ code: 'INVALID_JSON', message: 'A JSON field does not parse.', errors: [{ path, code: 'INVALID_JSON', message: 'is not valid JSON' }] });
    return;
  }
  const body = JSON.parse(JSON.stringify(ui.draft));
  const button = ui.els.save;
  button.disabled = true;
  say('Saving…');
  try {
    if (!ui.id) {
      const view = await create(body, upsert);
      ui.flash = view.created === false ? `Nothing changed: the same as version ${view.version}.` : `${view.created ? 'Saved' : 'Created'} ${KINDS[ui.plural]} ${view.id} (version ${view.version}).`;
      location.hash = `#${ui.plural}/${view.id}`;
      return;
    }
    const view = await api(url(ui.plural, ui.id, `?expected_version=${ui.latest}`), { method: 'PUT', body });
    takeView(view);
    renderEditorParts();
    say(view.created ? `Saved version ${view.version}.` : `Nothing changed: the same as version ${view.version}.`);
  } catch (err) {
    say('');
    if (err.code === 'INVALID_DEFINITION' || err.field) showIssues(err);
    else showError(err, 'Not saved:');
  } finally {
    button.disabled = false;
  }
}

function archivePanel() {
  const confirmRow = h('div', { class: 'actions', hidden: true });
  const ask = h('button', { type: 'button', class: 'danger-outline', on: { click: () => (confirmRow.hidden = false) } }, 'Archive…');
  const yes = h('button', {
    type: 'button',
    class: 'danger',
    on: {
      click: async () => {
        yes.disabled = true;
        try {
          await api(url(ui.plural, ui.id), { method: 'DELETE' });
          ui.flash = `Archived ${KINDS[ui.plural]} ${ui.id}: it is gone from the list; runs pinned to it keep its versions.`;
          location.hash = `#${ui.plural}`;
        } catch (err) {
          showError(err, 'Not archived:');
        } finally {
          yes.disabled = false;
          confirmRow.hidden = true;
        }
      },
    },
  }, 'Yes, archive it');
  append(confirmRow, h('span', {}, `Archive ${ui.id}? New runs cannot start; running ones keep their version.`), yes, h('button', { type: 'button', class: 'quiet', on: { click: () => (confirmRow.hidden = true) } }, 'Keep it'));
  return h('div', {}, ask, confirmRow);
}

// ----- versions, JSON, run --------------------------------------------------------------------------

function versionsCard() {
  if (!ui.id) return null;
  const items = [...ui.versions].reverse().map((v) =>
    h(
      'li',
      {},
      h('button', { type: 'button', class: 'linkish', 'aria-current': v.version === ui.version ? 'true' : null, on: { click: () => loadVersion(v.version) } }, `Version ${v.version}`),
      ' ',
      h('span', { class: 'muted small' }, [v.created_at ? new Date(v.created_at).toLocaleString() : '', v.created_by ? ` · ${v.created_by}` : ''].join('')),
    ),
  );
  const note = ui.version !== ui.latest ? h('p', { class: 'muted small' }, `Showing version ${ui.version}; saving it makes it version ${ui.latest + 1}.`) : null;
  return h('section', { class: 'card defs-side', 'aria-labelledby': 'df-versions' }, h('h3', { id: 'df-versions' }, 'Versions'), note, h('ul', { class: 'version-list' }, items));
}

function jsonCard() {
  const area = h('textarea', { id: 'df-json', class: 'code', rows: 10, spellcheck: 'false' });
  const file = h('input', { id: 'df-json-file', type: 'file', accept: '.json,application/json' });
  const download = h('a', { class: 'quiet', hidden: true }, 'Download');
  const errorEl = h('div', { class: 'alert', id: 'df-json-error', role: 'alert', hidden: true });
  const exportIt = () => {
    const definition = ui.saved || ui.draft;
    area.value = JSON.stringify(definition, null, 2);
    const blob = new Blob([area.value + '\n'], { type: 'application/json' });
    if (download.href) URL.revokeObjectURL(download.href);
    download.href = URL.createObjectURL(blob);
    download.download = `${KINDS[ui.plural]}-${definition.id || 'new'}${ui.version ? `-v${ui.version}` : ''}.json`;
    download.hidden = false;
  };
  file.addEventListener('change', async () => {
    const chosen = file.files && file.files[0];
    if (chosen) area.value = await chosen.text();
  });
  const importIt = async () => {
    errorEl.hidden = true;
    let parsed;
    try {
      parsed = JSON.parse(area.value);
    } catch (err) {
      errorEl.replaceChildren(errorBox({ code: 'INVALID_JSON', message: `The text is not valid JSON: ${err.message}` }));
      errorEl.hidden = false;
      return;
    }
    const kind = KINDS[ui.plural];
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed) || (parsed.kind && parsed.kind !== kind)) {
      errorEl.replaceChildren(errorBox({ code: 'INVALID_DEFINITION', message: `The JSON must be one ${kind} definition (an object).`, field: 'kind' }));
      errorEl.hidden = false;
      return;
    }
    if (ui.id && parsed.id !== ui.id) {
      // Another id is another definition: open it as a new one and save it there.
      ui.id = null;
      ui.saved = null;
      history.replaceState(null, '', `#${ui.plural}:new`);
    }
    ui.draft = parsed;
    renderEditorParts();
    await save({ upsert: true });
  };
  return h(
    'section',
    { class: 'card defs-side', 'aria-labelledby': 'df-json-title' },
    h('h3', { id: 'df-json-title' }, 'JSON import and export'),
    h('div', { class: 'field' }, h('label', { for: 'df-json' }, 'Definition JSON'), area),
    h('div', { class: 'field' }, h('label', { for: 'df-json-file' }, 'Load from a file'), file),
    errorEl,
    h(
      'div',
      { class: 'actions' },
      ui.id ? h('button', { type: 'button', class: 'quiet', on: { click: exportIt } }, 'Export this version') : null,
      download,
      h('button', { type: 'button', on: { click: importIt } }, 'Import and save'),
    ),
  );
}

function runControl(name, spec) {
  const id = `df-run-${name}`;
  const label = `${name}${spec.required === false ? ' (optional)' : ''}`;
  const hint = [spec.type, spec.description, spec.default !== undefined && spec.default !== null ? `default ${JSON.stringify(spec.default)}` : ''].filter(Boolean).join(' · ');
  let el;
  if (spec.type === 'boolean') el = h('select', { id }, h('option', { value: '' }, '—'), h('option', { value: 'true' }, 'true'), h('option', { value: 'false' }, 'false'));
  else if (spec.type === 'object' || spec.type === 'array') el = h('textarea', { id, class: 'code', rows: 3, spellcheck: 'false', placeholder: spec.type === 'array' ? '[ ]' : '{ }' });
  else if (spec.type === 'number' || spec.type === 'integer') el = h('input', { id, type: 'number', step: spec.type === 'integer' ? '1' : 'any' });
  else el = h('input', { id, type: 'text', spellcheck: 'false' });
  el.dataset.input = name;
  el.dataset.type = spec.type;
  return h('div', { class: 'field', dataset: { field: `inputs.${name}` } }, h('label', { for: id }, label), el, h('span', { class: 'muted small' }, hint), h('span', { class: 'field-error', id: `${id}-error`, role: 'alert', hidden: true }));
}

/** The typed value of one run input, or undefined when left empty; throws on JSON that does not parse. */
function runValue(el) {
  const raw = el.value.trim();
  if (raw === '') return undefined;
  const type = el.dataset.type;
  if (type === 'boolean') return raw === 'true';
  if (type === 'number' || type === 'integer') return Number(raw);
  if (type === 'object' || type === 'array') return JSON.parse(raw);
  return el.value;
}

function runCard() {
  if (!ui.id || !ui.saved || ui.plural === 'agents') return null;
  const specs = ui.plural === 'teams' ? { task: { type: 'string', description: 'What the team works on' } } : ui.saved.inputs || {};
  const controls = Object.entries(specs).map(([name, spec]) => runControl(name, spec));
  const errorEl = h('div', { class: 'alert', role: 'alert', hidden: true });
  const button = h('button', { type: 'submit', class: 'primary' }, `Run version ${ui.version}`);
  const form = h('form', { class: 'run-form', novalidate: true }, controls.length ? controls : h('p', { class: 'muted' }, 'This workflow takes no inputs.'), errorEl, h('div', { class: 'actions' }, button));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    errorEl.hidden = true;
    for (const el of form.querySelectorAll('[data-input]')) setFieldError(el, null);
    const inputs = {};
    for (const el of form.querySelectorAll('[data-input]')) {
      try {
        const value = runValue(el);
        if (value !== undefined) inputs[el.dataset.input] = value;
      } catch (err) {
        setFieldError(el, `Not valid JSON: ${err.message}`);
        el.focus();
        return;
      }
    }
    button.disabled = true;
    try {
      const started = await api(`${url(ui.plural, ui.id)}/runs`, { method: 'POST', body: { inputs, version: ui.version } });
      location.hash = `job=${encodeURIComponent(started.id)}`;
    } catch (err) {
      const name = err.field && err.field.startsWith('inputs.') ? err.field.slice(7) : null;
      const el = name ? form.querySelector(`[data-input="${CSS.escape(name)}"]`) : null;
      if (el) {
        setFieldError(el, `${err.message} [${err.code}]`);
        el.focus();
      } else {
        errorEl.replaceChildren(errorBox(err, { title: 'The run did not start:' }));
        errorEl.hidden = false;
      }
    } finally {
      button.disabled = false;
    }
  });
  return h('section', { class: 'card defs-side', 'aria-labelledby': 'df-run-title' }, h('h3', { id: 'df-run-title' }, 'Start a run'), form);
}

// ----- pages ------------------------------------------------------------------------------------------

function renderEditorParts() {
  const kind = KINDS[ui.plural];
  ui.els.title.textContent = ui.id ? `${kind[0].toUpperCase()}${kind.slice(1)} ${ui.id}` : `New ${kind}`;
  ui.els.version.textContent = ui.id ? `Version ${ui.version} of ${ui.latest}` : 'Not saved yet';
  ui.els.archive.replaceChildren(...(ui.id ? [archivePanel()] : []));
  ui.els.side.replaceChildren(...[runCard(), versionsCard(), jsonCard()].filter(Boolean));
  if (ui.builder) ui.builder.reset();
  rerender();
  clearIssues();
}

function emptyDraft(plural) {
  if (plural === 'agents') return { id: '', name: '', instructions: '' };
  if (plural === 'teams') return { id: '', name: '', agents: [], strategy: { type: known.strategies[0] } };
  return { id: '', name: '', inputs: {}, nodes: [], outputs: {} };
}

async function showEditor(view, plural, id) {
  const load = ++ui.load;
  Object.assign(ui, { plural, id, version: null, latest: null, versions: [], saved: null, draft: emptyDraft(plural), invalidNodes: new Set() });
  ui.badJson.clear();
  const els = {
    title: h('h2', { id: 'df-title', tabindex: '-1' }),
    version: h('span', { class: 'muted' }),
    dirty: h('span', { class: 'dirty-badge', role: 'status', hidden: true }, 'Unsaved changes'),
    status: h('p', { class: 'muted', role: 'status' }),
    problems: h('div', { class: 'alert problems', role: 'alert', hidden: true }),
    form: h('form', { class: 'defs-form', novalidate: true, 'aria-labelledby': 'df-title' }),
    save: h('button', { type: 'button', class: 'primary', on: { click: () => save() } }, 'Save'),
    archive: h('div', {}),
    graph: plural === 'workflows' ? h('div', { class: 'graph-box', id: 'df-graph' }) : null,
    side: h('div', { class: 'defs-side-col' }),
  };
  ui.els = els;
  els.form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    save();
  });
  const formCard = h('section', { class: 'card defs-main' }, els.problems, els.form, h('div', { class: 'actions save-bar' }, els.save, els.archive));
  await loadKinds(); // the builder's palette and the kind selects list the catalog's kinds
  if (load !== ui.load) return;
  ui.builder = els.graph ? workflowBuilder(els.graph) : null;
  const graphCard = els.graph ? h('section', { class: 'card defs-graph', 'aria-label': 'Workflow graph' }, h('h3', {}, 'Graph'), ui.builder.controls, els.graph) : null;
  view.replaceChildren(
    h('div', { class: 'defs-head' }, h('a', { href: `#${plural}` }, `← ${TITLES[plural]}`), els.title, els.version, els.dirty),
    els.status,
    h('div', { class: 'defs-columns' }, h('div', { class: 'defs-left' }, graphCard, formCard), els.side),
  );
  if (ui.flash) {
    say(ui.flash);
    ui.flash = null;
  }
  await loadRefs();
  if (load !== ui.load) return;
  if (!id) {
    renderEditorParts();
    document.documentElement.dataset.defs = `${plural}:new`;
    return;
  }
  try {
    const got = await api(url(plural, id));
    if (load !== ui.load) return;
    takeView(got);
    renderEditorParts();
    if (plural === 'workflows') loadSubInputs((ui.draft.nodes || []).filter((n) => n.kind === 'workflow').map((n) => n.workflow));
  } catch (err) {
    if (load !== ui.load) return;
    ui.loadFailed = true;
    showError(err, `Could not open ${KINDS[plural]} ${id}:`);
  }
  document.documentElement.dataset.defs = `${plural}/${id}`;
}

async function showList(view, plural) {
  const load = ++ui.load;
  const kind = KINDS[plural];
  const status = h('p', { class: 'muted', role: 'status' }, ui.flash || '');
  ui.flash = null;
  const errorEl = h('div', { class: 'alert', role: 'alert', hidden: true });
  const body = h('tbody');
  const table = h('table', { class: 'defs-table' }, h('caption', { class: 'visually-hidden' }, TITLES[plural]), h('thead', {}, h('tr', {}, ['Id', 'Name', 'Description', 'Version', 'Updated'].map((c) => h('th', { scope: 'col' }, c)))), body);
  const empty = h('p', { class: 'muted', hidden: true }, `No ${plural} yet.`);
  view.replaceChildren(
    h(
      'section',
      { class: 'card defs-list' },
      h('div', { class: 'card-head' }, h('h2', { id: 'df-title', tabindex: '-1' }, TITLES[plural]), h('div', { class: 'card-tools' }, h('a', { class: 'button', href: `#${plural}:new` }, `New ${kind}`))),
      h('p', { class: 'muted small' }, `To import a ${kind} from JSON, open “New ${kind}” and use the JSON panel.`),
      status,
      errorEl,
      table,
      empty,
    ),
  );
  try {
    const data = await api(url(plural));
    if (load !== ui.load) return;
    const items = data[plural] || [];
    body.replaceChildren(
      ...items.map((d) =>
        h(
          'tr',
          { dataset: { id: d.id } },
          // A built-in (the ask workflow) is read-only: it links to the jobs page, where its form is.
          h('td', {}, d.built_in ? h('a', { href: '#', title: 'Built in: ask a question on the jobs page' }, d.id) : h('a', { href: `#${plural}/${d.id}` }, d.id)),
          h('td', {}, d.name || ''),
          h('td', { class: 'muted' }, d.description || ''),
          h('td', {}, d.built_in ? h('span', { class: 'badge', dataset: { builtIn: '' } }, 'built-in') : String(d.latest_version ?? '')),
          h('td', { class: 'muted small' }, d.updated_at ? new Date(d.updated_at).toLocaleString() : ''),
        ),
      ),
    );
    empty.hidden = items.length > 0;
    table.hidden = items.length === 0;
  } catch (err) {
    if (load !== ui.load) return;
    errorEl.replaceChildren(errorBox(err, { title: `Could not list the ${plural}:` }));
    errorEl.hidden = false;
  }
  document.documentElement.dataset.defs = plural;
}

function markNav(current) {
  for (const a of document.querySelectorAll('.views-nav a')) {
    if (a.dataset.view === current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

/** Show the page the address names: a definitions page, or the jobs page (any other address). */
function route() {
  const m = ROUTE.exec(location.hash);
  const jobs = document.querySelector('main.layout');
  const view = document.getElementById('defs-view');
  delete document.documentElement.dataset.defs;
  if (!m) {
    ui.load += 1;
    ui.els = {};
    markNav('jobs');
    view.hidden = true;
    view.replaceChildren();
    jobs.hidden = false;
    return;
  }
  const [, plural, isNew, id] = m;
  ui.loadFailed = false;
  markNav(plural);
  jobs.hidden = true;
  view.hidden = false;
  if (isNew) showEditor(view, plural, null);
  else if (id) showEditor(view, plural, id);
  else showList(view, plural);
}

window.addEventListener('hashchange', route);
// A new function key: a definitions page on show reads again with it (the jobs page does the same).
// Browsers fire "change" again on blur: only a key other than the last one reloads (a form's edits stay).
const keyInput = document.getElementById('function-key');
let keyUsed = keyInput.value.trim();
keyInput.addEventListener('change', () => {
  const key = keyInput.value.trim();
  if (key === keyUsed) return;
  keyUsed = key;
  // A form being edited keeps its edits; a page that could not load (or a list) loads again.
  if (ROUTE.test(location.hash) && (ui.loadFailed || !ui.els.form)) route();
});
route();

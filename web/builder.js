// The drag-and-drop workflow builder on the graph (definitions.js mounts it on the workflow editor).
// Every action edits the one draft definition the forms and the JSON panel use, through `commit`, so the
// graph, the forms and the JSON stay in step. Each drag has a keyboard equivalent: the palette's buttons add
// a node, the "Connect" row connects two nodes, Delete removes the focused node or edge.
// The client refuses a cycle or a duplicate edge to help the user; the server validates again on save.

import { REPEAT, edgeFields, edgeTypes, graphEdges } from './graph.js';

// Which fields of which node kinds are edges (and of what type, which way, which one a drag makes by default)
// is the server's word: the catalog's node kinds (graph.js holds them). Nothing here names a kind or a field.
const DRAG_MIME = 'application/x-workflow-node-kind';
// Pixels a pointer moves before a press on a node is a drag (a connection) rather than a click (a selection).
const DRAG_START_PX = 6;
const UNDO_DEPTH = 50;

/** The builder's help, with the edges a drag makes by default from each kind (the catalog's). */
export function builderHint() {
  const autos = [];
  for (const t of edgeTypes()) for (const kind of t.kinds) if (edgeFields(kind).some((f) => f.type === t.type && f.auto)) autos.push(`from a ${kind} node a ${t.type} edge`);
  return (
    'Drag a kind from the palette onto the graph to add a node (onto a node: the new node follows it), or press it. ' +
    'Drag from one node onto another to connect them: the target runs after the source' +
    (autos.length ? ` (${autos.join(', ')}, unless "Edge" below says otherwise)` : '') +
    '. Select a node or an edge and press Delete to remove it; Enter or a double click opens its form.'
  );
}

// ----- the graph operations (pure on a workflow definition; no DOM) -------------------------------------

const nodeById = (workflow, id) => (workflow.nodes || []).find((n) => n && n.id === id);
const asList = (value) => (Array.isArray(value) ? value : []);

/** The edge type a connection from `source` makes: the one chosen, or under 'auto' the source kind's default
 * edge (the catalog's `auto`), else the first edge a node takes from the nodes before it (`after`). */
export function edgeType(source, chosen = 'auto') {
  if (chosen && chosen !== 'auto') return chosen;
  const own = edgeFields(source && source.kind).find((f) => f.auto && f.direction !== 'in');
  if (own) return own.type;
  const incoming = edgeTypes().find((t) => t.direction === 'in');
  return incoming ? incoming.type : null;
}

/** The field that holds an edge of `type` from `source` to `target`, and the node it is on ({node, spec}), or null. */
function holder(source, target, type) {
  const out = edgeFields(source && source.kind).find((f) => f.type === type && f.direction !== 'in');
  if (out) return { node: source, spec: out };
  const into = edgeFields(target && target.kind).find((f) => f.type === type && f.direction === 'in');
  return into ? { node: target, spec: into } : null;
}

/** A path of edges from `start` to `goal` (node ids, both ends included), or null. A loop's repeat edge is no step. */
function pathBetween(edges, start, goal) {
  const next = new Map();
  for (const e of edges) if (e.type !== REPEAT) (next.get(e.from) || next.set(e.from, []).get(e.from)).push(e.to);
  const cameFrom = new Map([[start, null]]);
  const queue = [start];
  while (queue.length) {
    const id = queue.shift();
    if (id === goal) {
      const path = [];
      for (let at = goal; at !== null; at = cameFrom.get(at)) path.unshift(at);
      return path;
    }
    for (const to of next.get(id) || []) {
      if (cameFrom.has(to)) continue;
      cameFrom.set(to, id);
      queue.push(to);
    }
  }
  return null;
}

/** Why `from` → `to` as `type` may not be added ({code, message}), or null when it may. */
export function connectProblem(workflow, from, to, type) {
  const source = nodeById(workflow, from);
  const target = nodeById(workflow, to);
  if (!source || !target) return { code: 'UNKNOWN_NODE', message: `Choose two nodes of this workflow (${source ? to : from || '—'} is none).` };
  if (from === to) return { code: 'CYCLE', message: `${from} cannot follow itself.` };
  if (!type) return { code: 'INVALID_EDGE', message: 'The edge types are not known yet (the catalog has not loaded).' };
  if (!holder(source, target, type)) {
    const known = edgeTypes().find((t) => t.type === type);
    const owners = known ? known.kinds.join(' or ') : null;
    return { code: 'INVALID_EDGE', message: owners ? `Only a ${owners} node has ${type} edges; ${known.direction === 'in' ? to : from} is a ${(known.direction === 'in' ? target : source).kind} node.` : `${type} is no edge type of a workflow.` };
  }
  const edges = graphEdges(workflow);
  const same = edges.find((e) => e.from === from && e.to === to && e.type !== REPEAT);
  if (same) return { code: 'DUPLICATE_EDGE', message: `${from} → ${to} is already an edge (${same.type}).` };
  const back = pathBetween(edges, to, from);
  if (back) {
    // The kinds that repeat nodes are those with a chain field (a loop's body).
    const repeaters = edgeTypes().filter((t) => t.direction === 'chain').flatMap((t) => t.kinds);
    const advice = repeaters.length ? ` To repeat nodes, use a ${[...new Set(repeaters)].join(' or ')} node.` : '';
    return { code: 'CYCLE', message: `${from} → ${to} would make a cycle (${[from, ...back].join(' → ')}).${advice}` };
  }
  return null;
}

/** Add the edge `from` → `to` of `type` to the workflow (in place); check it first with connectProblem. */
export function connect(workflow, from, to, type) {
  const at = holder(nodeById(workflow, from), nodeById(workflow, to), type);
  if (!at) return;
  const { node, spec } = at;
  node[spec.field] = [...asList(node[spec.field]), spec.direction === 'in' ? from : to];
}

/** Take `id` out of a node's edge field; a field the kind does not require goes when emptied. */
function without(node, spec, id) {
  const key = spec.field;
  if (!node || !Array.isArray(node[key]) || !node[key].includes(id)) return;
  node[key] = node[key].filter((x) => x !== id);
  if (!node[key].length && !spec.required) delete node[key];
}

/** Remove one drawn edge from the workflow (in place); returns why not when it cannot be removed alone. */
export function removeEdge(workflow, { from, to, type }) {
  if (type === REPEAT) {
    const owner = nodeById(workflow, to);
    const chain = edgeFields(owner && owner.kind).find((f) => f.direction === 'chain');
    return `A ${owner ? owner.kind : 'node'}'s repeat edge is the ${owner ? owner.kind : 'node'} itself: remove the nodes from its ${chain ? chain.field : 'list'} instead.`;
  }
  if (edgeTypes().some((t) => t.type === type && t.direction === 'chain')) {
    // A chain edge into `to` goes with `to`'s place in the list of the node that holds it (the edge's source,
    // or the node whose list holds both ends).
    for (const n of workflow.nodes || []) {
      const spec = n && edgeFields(n.kind).find((f) => f.type === type && f.direction === 'chain');
      const listed = spec ? asList(n[spec.field]) : [];
      if (listed.includes(to) && (n.id === from || listed.includes(from))) {
        without(n, spec, to);
        break;
      }
    }
    return null;
  }
  const at = holder(nodeById(workflow, from), nodeById(workflow, to), type);
  if (at) without(at.node, at.spec, at.spec.direction === 'in' ? from : to);
  return null;
}

/** Remove a node and every edge list that names it (in place); its mappings' references are left to the server's check. */
export function removeNode(workflow, id) {
  workflow.nodes = (workflow.nodes || []).filter((n) => !n || n.id !== id);
  for (const node of workflow.nodes) if (node) for (const spec of edgeFields(node.kind)) without(node, spec, id);
  if (workflow.start === id) delete workflow.start;
}

// ----- the builder's controls and the interactions on the graph ------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? '' : String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
  return node;
}

const selectionKey = (sel) => (!sel ? '' : sel.node ? `node:${sel.node}` : `edge:${sel.from}>${sel.to}:${sel.type}`);

/**
 * The builder for one editor. `getDraft()` is the draft definition; `commit(mutate)` applies an edit to it and
 * redraws the forms and the graph; `replaceDraft(def)` puts a whole definition back (undo); `addNode(kind)`
 * appends a new node of that kind (a fresh unique id) and returns its id; `openNode(id)` focuses its form.
 * Returns the controls to show above the graph, `attach(host)` for the graph's box and `afterRender()`.
 */
export function createBuilder({ nodeKinds, getDraft, commit, replaceDraft, addNode, openNode }) {
  const state = { selected: null, host: null, drag: null, undo: [] };
  const message = el('p', { class: 'builder-msg muted small', id: 'df-builder-msg', role: 'status' });
  const refusal = el('p', { class: 'builder-error field-error', id: 'df-builder-error', role: 'alert', hidden: true });
  const say = (text, refused = false) => {
    message.textContent = refused ? '' : text;
    refusal.textContent = refused ? text : '';
    refusal.hidden = !refused;
  };

  // One undoable edit of the draft; `done` says what happened (a function when it depends on the edit).
  // Undo keeps the draft before and after each edit: after a form edit, stepping back would lose it, so it stops.
  const edit = (mutate, done) => {
    const before = JSON.stringify(getDraft());
    commit(mutate);
    state.undo.push({ before, after: JSON.stringify(getDraft()) });
    if (state.undo.length > UNDO_DEPTH) state.undo.shift();
    undoBtn.disabled = false;
    say(typeof done === 'function' ? done() : done);
  };

  const tryConnect = (from, to, chosen) => {
    const draft = getDraft();
    const type = edgeType(nodeById(draft, from), chosen);
    const problem = connectProblem(draft, from, to, type);
    if (problem) {
      say(`Not connected: ${problem.message} [${problem.code}]`, true);
      return false;
    }
    edit((d) => connect(d, from, to, type), `Connected ${from} → ${to} (${type}).`);
    return true;
  };

  const add = (kind, after) => {
    let id;
    let type;
    edit(
      (d) => {
        id = addNode(kind);
        // A fresh node cannot close a cycle; an Edge choice the node dropped on does not have falls back to auto.
        const source = after ? nodeById(d, after) : null;
        type = source ? edgeType(source, edgeChoice.value) : null;
        if (type && connectProblem(d, after, id, type)) type = edgeType(source);
        if (type) connect(d, after, id, type);
      },
      () => `Added ${kind} node ${id}${type ? ` (${after} → ${id}, ${type})` : ''}: rename it in its form.`,
    );
    openNode(id);
  };

  // The palette: each kind a button (press: add) that can also be dragged onto the graph.
  const palette = el('div', { class: 'builder-palette', role: 'group', 'aria-label': 'Add a node: press a kind, or drag it onto the graph' });
  // The kinds are the server's (its catalog); the palette offers each.
  for (const kind of nodeKinds) {
    const button = el('button', { type: 'button', class: `palette-item g-kind-${kind}`, draggable: 'true', 'data-palette-kind': kind, 'aria-label': `Add a ${kind} node`, title: `Drag onto the graph, or press to add a ${kind} node` }, kind);
    button.addEventListener('click', () => add(kind));
    button.addEventListener('dragstart', (ev) => {
      ev.dataTransfer.setData(DRAG_MIME, kind);
      ev.dataTransfer.setData('text/plain', kind);
      ev.dataTransfer.effectAllowed = 'copy';
    });
    palette.append(button);
  }

  // The keyboard way to connect: From, To, Edge, Connect (the same check and edit as a drag).
  const fromSel = el('select', { id: 'df-connect-from' });
  const toSel = el('select', { id: 'df-connect-to' });
  const edgeChoice = el('select', { id: 'df-connect-edge' }, el('option', { value: 'auto' }, 'auto'), edgeTypes().map((t) => el('option', { value: t.type }, t.label)));
  const connectBtn = el('button', { type: 'button' }, 'Connect');
  connectBtn.addEventListener('click', () => tryConnect(fromSel.value, toSel.value, edgeChoice.value));
  // The label beside its select, not around it (a wrapped select's value would join the label's name).
  const labelled = (text, control) => el('span', { class: 'builder-field' }, el('label', { for: control.id }, text), control);
  const connectRow = el('div', { class: 'builder-connect', role: 'group', 'aria-label': 'Connect two nodes' }, labelled('From', fromSel), labelled('To', toSel), labelled('Edge', edgeChoice), connectBtn);

  // What is selected, with its actions; and undo.
  const selectionText = el('span', { class: 'builder-selection-text' });
  const editBtn = el('button', { type: 'button', class: 'quiet', hidden: true }, 'Edit in the form');
  const removeBtn = el('button', { type: 'button', class: 'danger-outline', hidden: true }, 'Remove');
  const undoBtn = el('button', { type: 'button', class: 'quiet', disabled: true }, 'Undo graph edit');
  editBtn.addEventListener('click', () => state.selected && state.selected.node && openNode(state.selected.node));
  removeBtn.addEventListener('click', () => removeSelected());
  undoBtn.addEventListener('click', () => undo());
  const selectionRow = el('div', { class: 'builder-selection' }, selectionText, editBtn, removeBtn, undoBtn);

  function undo() {
    const last = state.undo.pop();
    if (!last) return;
    if (JSON.stringify(getDraft()) !== last.after) {
      state.undo = [];
      undoBtn.disabled = true;
      say('Not undone: the form changed the workflow since the last graph edit (undo covers graph edits only).', true);
      return;
    }
    replaceDraft(JSON.parse(last.before));
    say('Undone.');
  }

  function select(sel) {
    state.selected = sel;
    markSelection();
  }

  function removeSelected() {
    const sel = state.selected;
    if (!sel) return;
    if (sel.node) {
      edit((d) => removeNode(d, sel.node), `Removed node ${sel.node} and its edges.`);
    } else {
      if (sel.type === REPEAT) {
        say(removeEdge(getDraft(), sel), true); // says why, changes nothing
        return;
      }
      edit((d) => removeEdge(d, sel), `Removed edge ${sel.from} → ${sel.to} (${sel.type}).`);
    }
    state.selected = null;
    markSelection();
    if (state.host) state.host.focus();
  }

  /** Mark the selection in the drawing and the selection row; a selection the draft no longer has is dropped. */
  function markSelection() {
    const host = state.host;
    if (!host) return;
    const key = selectionKey(state.selected);
    let found = false;
    for (const line of host.querySelectorAll('path.g-edge.g-selected')) line.classList.remove('g-selected');
    for (const item of host.querySelectorAll('g.g-node, path.g-edge-hit')) {
      const isNode = item.matches('g.g-node');
      const mine = key === (isNode ? `node:${item.dataset.node}` : `edge:${item.dataset.from}>${item.dataset.to}:${item.dataset.edge}`);
      item.classList.toggle('g-selected', mine);
      item.setAttribute('aria-pressed', mine ? 'true' : 'false');
      // The visible line is drawn just before its hit path (graph.js).
      if (mine && !isNode) item.previousElementSibling.classList.add('g-selected');
      found ||= mine;
    }
    if (!found) state.selected = null;
    const sel = state.selected;
    selectionText.textContent = !sel ? 'Nothing selected.' : sel.node ? `Selected: node ${sel.node}.` : `Selected: edge ${sel.from} → ${sel.to} (${sel.type}).`;
    editBtn.hidden = !(sel && sel.node);
    removeBtn.hidden = !sel;
    removeBtn.textContent = sel && sel.node ? `Remove node ${sel.node}` : 'Remove edge';
  }

  function refreshChoices() {
    const ids = (getDraft().nodes || []).map((n) => n && n.id).filter(Boolean);
    for (const sel of [fromSel, toSel]) {
      const keep = sel.value;
      sel.replaceChildren(...ids.map((id) => el('option', { value: id }, id)));
      if (ids.includes(keep)) sel.value = keep;
    }
    if (toSel.value === fromSel.value && ids.length > 1) toSel.value = ids.find((id) => id !== fromSel.value);
    undoBtn.disabled = state.undo.length === 0;
  }

  // ----- pointer: a press on a node and a move is a connection; a press without one a selection -----

  const nodeAt = (x, y) => {
    const hit = document.elementFromPoint(x, y);
    const g = hit && hit.closest ? hit.closest('g.g-node') : null;
    return g && state.host.contains(g) ? g : null;
  };

  function dragLine(ev) {
    const drag = state.drag;
    const svgEl = state.host.querySelector('svg.wf-graph');
    if (!svgEl) return;
    const toSvg = (x, y) => new DOMPoint(x, y).matrixTransform(svgEl.getScreenCTM().inverse());
    const box = drag.g.getBoundingClientRect();
    const a = toSvg(box.left + box.width / 2, box.top + box.height / 2);
    const b = toSvg(ev.clientX, ev.clientY);
    if (!drag.line) {
      drag.line = document.createElementNS('http://www.w3.org/2000/svg', 'line');
      drag.line.setAttribute('class', 'g-drag-line');
      svgEl.append(drag.line);
    }
    Object.entries({ x1: a.x, y1: a.y, x2: b.x, y2: b.y }).forEach(([k, v]) => drag.line.setAttribute(k, String(v)));
    for (const g of state.host.querySelectorAll('g.g-drop-target')) g.classList.remove('g-drop-target');
    const over = nodeAt(ev.clientX, ev.clientY);
    if (over && over !== drag.g) over.classList.add('g-drop-target');
  }

  function onPointerMove(ev) {
    const drag = state.drag;
    if (!drag) return;
    if (!drag.moving && Math.hypot(ev.clientX - drag.x, ev.clientY - drag.y) < DRAG_START_PX) return;
    drag.moving = true;
    state.host.classList.add('connecting');
    dragLine(ev);
  }

  function onPointerUp(ev) {
    const drag = state.drag;
    endDrag();
    if (!drag) return;
    if (!drag.moving) {
      select({ node: drag.id });
      return;
    }
    const over = nodeAt(ev.clientX, ev.clientY);
    if (!over) say('Not connected: drop on another node to connect it.', true);
    else if (over.dataset.node === drag.id) say('Not connected: drop on another node, not on the same one.', true);
    else tryConnect(drag.id, over.dataset.node, edgeChoice.value);
  }

  function endDrag() {
    window.removeEventListener('pointermove', onPointerMove);
    window.removeEventListener('pointerup', onPointerUp);
    if (state.drag && state.drag.line) state.drag.line.remove();
    state.drag = null;
    if (!state.host) return;
    state.host.classList.remove('connecting');
    for (const g of state.host.querySelectorAll('g.g-drop-target')) g.classList.remove('g-drop-target');
  }

  function onPointerDown(ev) {
    if (ev.button !== 0) return;
    const g = ev.target.closest('g.g-node');
    const edge = ev.target.closest('path.g-edge-hit');
    if (edge) {
      select({ from: edge.dataset.from, to: edge.dataset.to, type: edge.dataset.edge });
      return;
    }
    if (!g) return;
    state.drag = { id: g.dataset.node, g, x: ev.clientX, y: ev.clientY, moving: false };
    window.addEventListener('pointermove', onPointerMove);
    window.addEventListener('pointerup', onPointerUp);
  }

  // ----- keyboard on the graph ---------------------------------------------------------------------

  function onKeyDown(ev) {
    const g = ev.target.closest && ev.target.closest('g.g-node');
    const edge = ev.target.closest && ev.target.closest('path.g-edge-hit');
    if ((ev.key === 'z' || ev.key === 'Z') && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      undo();
    } else if (ev.key === 'Escape') select(null);
    else if ((ev.key === 'Delete' || ev.key === 'Backspace') && (g || edge)) {
      ev.preventDefault();
      select(g ? { node: g.dataset.node } : { from: edge.dataset.from, to: edge.dataset.to, type: edge.dataset.edge });
      removeSelected();
    } else if ((ev.key === 'Enter' || ev.key === ' ') && g) {
      ev.preventDefault();
      openNode(g.dataset.node);
    }
  }

  function onFocusIn(ev) {
    const g = ev.target.closest && ev.target.closest('g.g-node');
    const edge = ev.target.closest && ev.target.closest('path.g-edge-hit');
    if (g) select({ node: g.dataset.node });
    else if (edge) select({ from: edge.dataset.from, to: edge.dataset.to, type: edge.dataset.edge });
  }

  // ----- the palette's drop ----------------------------------------------------------------------------

  function onDragOver(ev) {
    if (!ev.dataTransfer || !ev.dataTransfer.types.includes(DRAG_MIME)) return;
    ev.preventDefault();
    ev.dataTransfer.dropEffect = 'copy';
    state.host.classList.add('drop-here');
    for (const g of state.host.querySelectorAll('g.g-drop-target')) g.classList.remove('g-drop-target');
    const g = ev.target.closest && ev.target.closest('g.g-node');
    if (g) g.classList.add('g-drop-target');
  }

  function onDragLeave(ev) {
    if (ev.relatedTarget && state.host.contains(ev.relatedTarget)) return;
    state.host.classList.remove('drop-here');
    for (const g of state.host.querySelectorAll('g.g-drop-target')) g.classList.remove('g-drop-target');
  }

  function onDrop(ev) {
    const kind = ev.dataTransfer && ev.dataTransfer.getData(DRAG_MIME);
    onDragLeave({});
    if (!kind || !nodeKinds.includes(kind)) return;
    ev.preventDefault();
    const g = ev.target.closest && ev.target.closest('g.g-node');
    add(kind, g ? g.dataset.node : null);
  }

  /** Listen on the graph's box (it outlives every drawing inside it). */
  function attach(host) {
    state.host = host;
    host.setAttribute('tabindex', '-1');
    host.classList.add('builder-target');
    host.addEventListener('pointerdown', onPointerDown);
    host.addEventListener('keydown', onKeyDown);
    host.addEventListener('focusin', onFocusIn);
    host.addEventListener('dblclick', (ev) => {
      const g = ev.target.closest('g.g-node');
      if (g) openNode(g.dataset.node);
    });
    host.addEventListener('dragover', onDragOver);
    host.addEventListener('dragleave', onDragLeave);
    host.addEventListener('drop', onDrop);
  }

  /** After each drawing: the selection marked again, the node choices of the Connect row, undo's state. */
  function afterRender() {
    refreshChoices();
    markSelection();
  }

  /** A newly loaded definition: nothing selected, nothing to undo. */
  function reset() {
    state.undo = [];
    state.selected = null;
    say('');
  }

  const controls = el(
    'div',
    { class: 'builder', id: 'df-builder' },
    el('p', { class: 'muted small', id: 'df-builder-hint' }, builderHint()),
    palette,
    connectRow,
    selectionRow,
    message,
    refusal,
  );
  return { controls, attach, afterRender, reset };
}

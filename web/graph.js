// The workflow graph: edges from a workflow definition, a small layered layout, and an SVG drawing.
// No dependencies. Node ids and titles reach the SVG through textContent only.

const SVG_NS = 'http://www.w3.org/2000/svg';
const NODE_W = 156;
const NODE_H = 46;
const GAP_X = 36;
const GAP_Y = 54;
const PAD = 16;
// Barycentre sweeps that order each layer to cross fewer edges (a few are plenty at 64 nodes).
const SWEEPS = 4;

// The edge a "chain" field draws from its last node back to the node that holds it (a loop repeating its body).
export const REPEAT = 'repeat';

// The node kinds as the server's catalog publishes them (GET /api/catalog, node_kinds): each kind's fields that
// list node ids as edges ({field, type, direction, label, auto, required}) and the field that says what a node of
// the kind does. The console keeps no copy: until the catalog is set, nodes are drawn without edges.
let nodeKinds = new Map();

/** Use the catalog's node kinds (app.js calls this when the catalog loads). */
export function setNodeKinds(kinds) {
  nodeKinds = new Map((Array.isArray(kinds) ? kinds : []).map((k) => [k.kind, k]));
}

/** The edge fields of a node kind (the catalog's), or none for a kind it does not list. */
export function edgeFields(kind) {
  const entry = nodeKinds.get(kind);
  return entry && Array.isArray(entry.edges) ? entry.edges : [];
}

/** Every edge type of the catalog once, in its order: {type, label, direction, kinds (the kinds with it)}. */
export function edgeTypes() {
  const types = new Map();
  for (const [kind, entry] of nodeKinds) {
    for (const f of entry.edges || []) {
      if (!types.has(f.type)) types.set(f.type, { type: f.type, label: f.label, direction: f.direction, kinds: [] });
      types.get(f.type).kinds.push(kind);
    }
  }
  return [...types.values()];
}

/** Every edge of a workflow, from each node's edge fields as the catalog describes its kind. */
export function graphEdges(workflow) {
  const nodes = Array.isArray(workflow && workflow.nodes) ? workflow.nodes : [];
  const ids = new Set(nodes.map((n) => n && n.id).filter(Boolean));
  const edges = [];
  const add = (from, to, type) => {
    if (ids.has(from) && ids.has(to) && from !== to) edges.push({ from, to, type });
  };
  const list = (value) => (Array.isArray(value) ? value : []);
  for (const node of nodes) {
    if (!node || !node.id) continue;
    for (const { field, type, direction } of edgeFields(node.kind)) {
      const listed = list(node[field]);
      if (direction === 'in') for (const from of listed) add(from, node.id, type);
      else if (direction === 'out') for (const to of listed) add(node.id, to, type);
      else if (direction === 'chain' && listed.length) {
        add(node.id, listed[0], type);
        for (let i = 1; i < listed.length; i += 1) add(listed[i - 1], listed[i], type);
        add(listed[listed.length - 1], node.id, REPEAT);
      }
    }
  }
  return edges;
}

/** Whether an edge's type is said on the drawing: its source kind has several fields that lead out of it. */
function labelled(node, type) {
  const out = edgeFields(node && node.kind).filter((f) => f.direction === 'out');
  return out.length > 1 && out.some((f) => f.type === type);
}

/** Edges that close a ring (found by depth-first search from each node in order): drawn, never layered. */
function backEdges(ids, edges) {
  const out = new Map(ids.map((id) => [id, []]));
  const back = new Set();
  // A repeat edge (a chain's way back) always points back up; the others are back edges only when they close a ring.
  edges.forEach((e, i) => (e.type === REPEAT ? back.add(i) : out.get(e.from).push([e.to, i])));
  const state = new Map();
  const visit = (id) => {
    state.set(id, 'open');
    for (const [to, i] of out.get(id)) {
      if (state.get(to) === 'open') back.add(i);
      else if (!state.has(to)) visit(to);
    }
    state.set(id, 'done');
  };
  for (const id of ids) if (!state.has(id)) visit(id);
  return back;
}

/** Layer of each node: the longest path to it over the forward edges (sources in layer 0). */
function assignLayers(ids, forward) {
  const layer = new Map(ids.map((id) => [id, 0]));
  // Relaxation converges within |V| rounds on a DAG; ids are at most 64.
  for (let round = 0; round < ids.length; round += 1) {
    let changed = false;
    for (const e of forward) {
      if (layer.get(e.to) < layer.get(e.from) + 1) {
        layer.set(e.to, layer.get(e.from) + 1);
        changed = true;
      }
    }
    if (!changed) break;
  }
  return layer;
}

function orderLayers(ids, forward, layer) {
  const rows = [];
  for (const id of ids) {
    const l = layer.get(id);
    (rows[l] ||= []).push(id);
  }
  const pos = new Map();
  const place = () => rows.forEach((row) => (row || []).forEach((id, i) => pos.set(id, i)));
  place();
  const parents = new Map(ids.map((id) => [id, []]));
  const children = new Map(ids.map((id) => [id, []]));
  for (const e of forward) {
    parents.get(e.to).push(e.from);
    children.get(e.from).push(e.to);
  }
  const centre = (id, near) => {
    const list = near.get(id);
    return list.length ? list.reduce((s, n) => s + pos.get(n), 0) / list.length : pos.get(id);
  };
  for (let sweep = 0; sweep < SWEEPS; sweep += 1) {
    const down = sweep % 2 === 0;
    const order = down ? rows.keys() : [...rows.keys()].reverse();
    for (const l of order) {
      const row = rows[l];
      if (!row) continue;
      const near = down ? parents : children;
      // A stable sort keeps the definition's order among equals: the drawing does not jump while editing.
      row.sort((a, b) => centre(a, near) - centre(b, near));
      row.forEach((id, i) => pos.set(id, i));
    }
  }
  return rows.map((row) => row || []);
}

/** Positions of every node (top-left corner) and the drawing's size. */
export function layout(workflow) {
  const nodes = (Array.isArray(workflow && workflow.nodes) ? workflow.nodes : []).filter((n) => n && n.id);
  const seen = new Set();
  const unique = nodes.filter((n) => !seen.has(n.id) && seen.add(n.id));
  const ids = unique.map((n) => n.id);
  const edges = graphEdges({ nodes: unique });
  const back = backEdges(ids, edges);
  const forward = edges.filter((_, i) => !back.has(i));
  const layer = assignLayers(ids, forward);
  const rows = orderLayers(ids, forward, layer);
  const widest = Math.max(1, ...rows.map((r) => r.length));
  const width = PAD * 2 + widest * NODE_W + (widest - 1) * GAP_X;
  const boxes = new Map();
  rows.forEach((row, l) => {
    const rowWidth = row.length * NODE_W + (row.length - 1) * GAP_X;
    const left = (width - rowWidth) / 2;
    row.forEach((id, i) => boxes.set(id, { x: left + i * (NODE_W + GAP_X), y: PAD + l * (NODE_H + GAP_Y), layer: l }));
  });
  const height = PAD * 2 + rows.length * NODE_H + Math.max(0, rows.length - 1) * GAP_Y;
  return { nodes: unique, boxes, edges: edges.map((e, i) => ({ ...e, back: back.has(i) })), width, height: Math.max(height, NODE_H + PAD * 2) };
}

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function edgePath(a, b, back) {
  const x1 = a.x + NODE_W / 2;
  const x2 = b.x + NODE_W / 2;
  if (back) {
    // Around the right-hand side, back up to the node that repeats.
    const right = Math.max(a.x, b.x) + NODE_W + GAP_X / 2;
    const y1 = a.y + NODE_H / 2;
    const y2 = b.y + NODE_H / 2;
    return `M ${a.x + NODE_W} ${y1} C ${right} ${y1}, ${right} ${y2}, ${b.x + NODE_W} ${y2}`;
  }
  const y1 = a.y + NODE_H;
  const y2 = b.y;
  const mid = (y1 + y2) / 2;
  return `M ${x1} ${y1} C ${x1} ${mid}, ${x2} ${mid}, ${x2} ${y2}`;
}

/** A wide transparent copy of an edge's path: what a pointer or the keyboard selects (a 1.6px line is hard to hit). */
function edgeHit(path, e) {
  return svg('path', {
    d: path.getAttribute('d'),
    class: 'g-edge-hit',
    'data-from': e.from,
    'data-to': e.to,
    'data-edge': e.type,
    tabindex: 0,
    role: 'button',
    'aria-label': `Edge ${e.from} to ${e.to}, ${e.type}`,
    'aria-keyshortcuts': 'Delete',
  });
}

function clip(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** What a node does, in a few words under its id: its kind, and the field the catalog names for the kind. */
function subtitle(node) {
  const entry = nodeKinds.get(node.kind);
  const detail = entry && entry.summary_field ? node[entry.summary_field] : null;
  return detail && typeof detail === 'string' ? `${node.kind} · ${detail}` : node.kind || '?';
}

/**
 * Draw the workflow into `host` (replacing what was there). `invalid` is a Set of node ids to mark;
 * `start` the start node. Every node is a <g data-node data-kind>, every edge a <path data-from data-to data-edge>.
 * `editable` (the builder, builder.js): nodes and edges are focusable buttons, each edge with a wide hit path.
 */
export function renderGraph(host, workflow, { invalid = new Set(), onSelect, editable = false } = {}) {
  const g = layout(workflow);
  const root = svg('svg', {
    class: editable ? 'wf-graph wf-editable' : 'wf-graph',
    viewBox: `0 0 ${g.width} ${g.height}`,
    width: g.width,
    height: g.height,
    // An image has no focusable parts for assistive technology; the editable graph is a group of buttons.
    role: editable ? 'group' : 'img',
    'aria-label': `Workflow graph: ${g.nodes.length} nodes, ${g.edges.length} edges`,
  });
  const defs = svg('defs');
  for (const type of new Set(g.edges.map((e) => e.type))) {
    const marker = svg('marker', { id: `arrow-${type}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
    marker.append(svg('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: `g-arrow g-edge-${type}` }));
    defs.append(marker);
  }
  root.append(defs);
  const startId = workflow && workflow.start ? workflow.start : g.nodes[0] && g.nodes[0].id;
  for (const e of g.edges) {
    const a = g.boxes.get(e.from);
    const b = g.boxes.get(e.to);
    const path = svg('path', {
      d: edgePath(a, b, e.back),
      class: `g-edge g-edge-${e.type}`,
      'data-from': e.from,
      'data-to': e.to,
      'data-edge': e.type,
      'marker-end': `url(#arrow-${e.type})`,
    });
    path.append(svg('title', {}, `${e.from} → ${e.to} (${e.type})`));
    root.append(path);
    if (editable) root.append(edgeHit(path, e));
    if (!e.back && labelled(g.nodes.find((n) => n.id === e.from), e.type)) {
      // Which way a node with several ways out (a condition) goes, halfway down its edge.
      const x = (a.x + b.x) / 2 + NODE_W / 2 + 4;
      const y = (a.y + NODE_H + b.y) / 2;
      root.append(svg('text', { x, y, class: `g-edge-label g-edge-${e.type}` }, e.type));
    }
  }
  for (const node of g.nodes) {
    const box = g.boxes.get(node.id);
    const cls = ['g-node', `g-kind-${node.kind || 'unknown'}`];
    if (invalid.has(node.id)) cls.push('g-invalid');
    if (node.id === startId) cls.push('g-start');
    const focusable = onSelect || editable;
    const group = svg('g', {
      class: cls.join(' '),
      'data-node': node.id,
      'data-kind': node.kind || '',
      transform: `translate(${box.x} ${box.y})`,
      tabindex: focusable ? 0 : null,
      role: editable ? 'button' : null,
      'aria-label': editable ? `Node ${node.id}, ${subtitle(node)}` : null,
      'aria-keyshortcuts': editable ? 'Enter Delete' : null,
    });
    group.append(svg('title', {}, `${node.id}: ${subtitle(node)}${node.title ? ` — ${node.title}` : ''}`));
    group.append(svg('rect', { width: NODE_W, height: NODE_H, rx: 8, ry: 8 }));
    group.append(svg('text', { x: 10, y: 19, class: 'g-id' }, clip(node.id, 20)));
    group.append(svg('text', { x: 10, y: 36, class: 'g-sub' }, clip(subtitle(node), 24)));
    if (onSelect) {
      group.addEventListener('click', () => onSelect(node.id));
      group.addEventListener('keydown', (ev) => {
        if (ev.key === 'Enter' || ev.key === ' ') {
          ev.preventDefault();
          onSelect(node.id);
        }
      });
    }
    root.append(group);
  }
  host.replaceChildren(root);
  return g;
}

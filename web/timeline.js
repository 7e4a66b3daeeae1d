// The job timeline: one row per step, its attempts, retry waits and human waits as bars on a time axis.
// Built from the job's event stream (GET /api/jobs/{id}/events, docs/events.md); when the stream is not
// available it is drawn, coarser, from the job view's steps (one bar per step, attempts not told apart).
// Every piece of data reaches the page as text; bars are placed with CSSOM (el.style), which the CSP allows.

// Nice tick intervals for the axis (ms); the first that gives at most MAX_TICKS ticks is used.
const TICK_STEPS = [100, 250, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000, 900000, 1800000, 3600000, 7200000, 21600000, 43200000, 86400000];
const MAX_TICKS = 6;
const MIN_SPAN_MS = 1000;
const TICK_MS = 500;
const FINISHED = new Set(['succeeded', 'failed', 'skipped', 'cancelled']);
const LEGEND = [
  ['attempt', 'running', 'Attempt running'],
  ['attempt', 'succeeded', 'Attempt succeeded'],
  ['attempt', 'failed', 'Attempt failed'],
  ['retry', 'waiting', 'Retry wait (backoff)'],
  ['human', 'waiting', 'Waiting for a person'],
];

function ms(value) {
  if (value === null || value === undefined || value === '') return null;
  const t = typeof value === 'number' ? value : Date.parse(value);
  return Number.isFinite(t) ? t : null;
}

export function fmtSpan(value) {
  const v = Math.max(0, Math.round(value));
  if (v < 1000) return `${v} ms`;
  if (v < 60000) return `${(v / 1000).toFixed(1)} s`;
  // Rounded once, then split: never "23 h 60 min" nor "4 min 60 s".
  if (v < 3600000) {
    const sec = Math.round(v / 1000);
    return sec < 3600 ? `${Math.floor(sec / 60)} min ${sec % 60} s` : '1 h 0 min';
  }
  const min = Math.round(v / 60000);
  if (min < 2 * 24 * 60) return `${Math.floor(min / 60)} h ${min % 60} min`;
  const hours = Math.round(min / 60);
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') node.className = value;
    else if (name === 'text') node.textContent = String(value);
    else if (name === 'dataset') Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// ----- the model: pure functions over plain objects ------------------------------------------------

/** An empty timeline model. */
export function newModel() {
  return { source: null, t0: null, tLast: null, endAt: null, status: null, finished: false, rows: new Map(), order: [], answers: [] };
}

function rowOf(model, stepId, kind) {
  let row = model.rows.get(stepId);
  if (!row) {
    row = { id: stepId, kind: kind || '', title: '', state: 'pending', attempts: 0, tools: [], segments: [] };
    model.rows.set(stepId, row);
    model.order.push(stepId);
  }
  if (kind && !row.kind) row.kind = kind;
  return row;
}

function openSegment(row, kind) {
  for (let i = row.segments.length - 1; i >= 0; i -= 1) {
    const seg = row.segments[i];
    if (seg.end === null && (!kind || seg.kind === kind)) return seg;
  }
  return null;
}

function close(seg, at, state) {
  if (!seg) return;
  seg.end = Math.max(seg.start, at);
  if (state) seg.state = state;
}

function closeAll(row, at, state) {
  for (const seg of row.segments) {
    if (seg.end === null) close(seg, at, seg.kind === 'attempt' ? state : null);
  }
}

function lastAttempt(row) {
  return row.segments.filter((s) => s.kind === 'attempt').reduce((n, s) => Math.max(n, s.attempt || 0), 0);
}

/** The end of the row's last closed bar (null when none closed yet). */
function lastEnd(row) {
  const ends = row.segments.filter((seg) => seg.end !== null).map((seg) => seg.end);
  return ends.length ? Math.max(...ends) : null;
}

/**
 * One `step` event applied to its row: attempts open and close, retry and human waits begin and end. Every step
 * event, the current state's too, carries the time of its change (api/events_derive.py), so bars start at ``at``.
 */
function applyStep(model, data, when) {
  const row = rowOf(model, String(data.step_id), data.kind);
  if (row.fromView) {
    // The stream tells this step's own story now: the bar drawn from the view gives way.
    row.segments = [];
    row.fromView = false;
  }
  const attempt = Number.isInteger(data.attempt) ? data.attempt : null;
  row.state = data.state;
  if (data.error) row.error = data.error;
  if (data.state === 'started') startAttempt(model, row, attempt || lastAttempt(row) + 1, when, data.committed);
  else if (data.state === 'retrying') beginRetry(row, data, attempt, when);
  else if (data.state === 'waiting') {
    if (openSegment(row, 'human')) return;
    closeAll(row, when, 'failed');
    row.segments.push({ kind: 'human', start: when, end: null, state: 'waiting' });
  } else if (FINISHED.has(data.state)) {
    const done = row.segments.find((seg) => seg.kind === 'attempt' && seg.attempt === attempt && seg.end !== null);
    if (!done || openSegment(row)) finishRow(row, data, when);
  }
}

/** A failed attempt waits out its backoff from ``when`` (its end); ``attempt`` is the one that comes next (docs/events.md). */
function beginRetry(row, data, attempt, when) {
  const open = openSegment(row, 'retry');
  if (open) {
    open.planned = ms(data.retry_at); // the current state, said again
    return;
  }
  const running = openSegment(row, 'attempt');
  close(running, when, 'failed');
  if (running && data.error) running.error = data.error;
  const last = lastAttempt(row);
  const next = attempt && attempt > last ? attempt : last + 1;
  row.attempts = Math.max(row.attempts, last);
  row.segments.push({ kind: 'retry', attempt: next, start: when, end: null, planned: ms(data.retry_at), state: 'waiting' });
}

/** An attempt begins; the same attempt said again (current state, then history) only sets its start right. */
function startAttempt(model, row, n, at, committed) {
  row.attempts = Math.max(row.attempts, n);
  const same = row.segments.find((seg) => seg.kind === 'attempt' && seg.attempt === n);
  if (same) {
    // The history's time (the attempt's scheduled time) is the truth; the current state's is the orchestrator's.
    if (committed && same.end === null) {
      for (const seg of row.segments) if (seg !== same && seg.end !== null && seg.end > at && seg.end <= same.start) seg.end = Math.max(seg.start, at);
      same.start = at;
    }
    return;
  }
  closeAll(row, at, 'failed');
  fillGap(model, row, at);
  row.segments.push({ kind: 'attempt', attempt: n, start: at, end: null, state: 'running' });
}

/**
 * A stream read after the fact holds only the history: the time between an attempt's end and the next attempt
 * was a person's wait when someone answered in it (a `user answered` log line), else a retry backoff.
 */
function fillGap(model, row, at) {
  const before = row.segments.filter((seg) => seg.end !== null && seg.end <= at);
  if (!before.length) return;
  const last = before.reduce((a, b) => (b.end > a.end ? b : a));
  if (last.kind !== 'attempt' || last.end >= at) return;
  const answered = model.answers.find((t) => t > last.end && t <= at);
  if (answered !== undefined) row.segments.push({ kind: 'human', start: last.end, end: answered, state: 'waiting', inferred: true });
  else if (last.state === 'failed') row.segments.push({ kind: 'retry', attempt: last.attempt + 1, start: last.end, end: at, state: 'waiting', inferred: true });
}

function finishRow(row, data, at) {
  const running = openSegment(row, 'attempt');
  if (!running && data.state !== 'skipped' && typeof data.duration_ms === 'number' && !row.segments.some((s) => s.kind === 'attempt')) {
    // The stream told the end and the duration only: the attempt is drawn back from its end.
    row.segments.push({ kind: 'attempt', attempt: data.attempt || 1, start: at - data.duration_ms, end: at, state: data.state });
  }
  if (running && data.error) running.error = data.error;
  closeAll(row, at, data.state);
}

/** Apply one event of the stream (type and its data JSON) to the model. */
export function applyEvent(model, type, data) {
  const at = ms(data && data.at);
  if (at === null) return;
  if (model.source === 'view') {
    // The stream tells the whole story from the start: the coarse bars drawn from the view give way.
    for (const row of model.rows.values()) row.segments = [];
    Object.assign(model, { t0: null, tLast: null, endAt: null, answers: [] });
  }
  model.source = 'events';
  const now = model.tLast === null ? at : Math.max(model.tLast, at);
  if (model.t0 === null || at < model.t0) model.t0 = at;
  model.tLast = now;
  if (type === 'step') applyStep(model, data, at);
  else if (type === 'tool_call' && data.step_id) {
    const row = rowOf(model, String(data.step_id));
    if (data.tool && !row.tools.includes(String(data.tool))) row.tools.push(String(data.tool));
  } else if (type === 'question' && data.step_id) {
    // The question's time is when it was asked: the person's wait begins there.
    const row = rowOf(model, String(data.step_id));
    const open = openSegment(row, 'human');
    if (open) open.start = Math.max(lastEnd(row) ?? at, at);
    else {
      closeAll(row, at, 'failed');
      row.segments.push({ kind: 'human', start: at, end: null, state: 'waiting' });
    }
  } else if (type === 'log' && data.topic === 'answer') {
    // A person answered: their wait ends here (and a stream read after the fact learns of the wait).
    model.answers.push(at);
    for (const row of model.rows.values()) close(openSegment(row, 'human'), at);
  } else if (type === 'status') applyStatus(model, data.status, at, data.finished === true);
  else if (type === 'end') {
    applyStatus(model, data.status, at, true);
    model.endAt = at;
  }
}

/** A status event (`finished`: the job has ended, as the server says; the end event always has). */
function applyStatus(model, status, at, finished) {
  model.status = status || model.status;
  model.finished = model.finished || finished;
  for (const row of model.rows.values()) {
    // A person answered (the job runs again) or the job ended: the open human waits end here.
    for (const seg of row.segments) if (seg.kind === 'human' && seg.end === null && status !== 'waiting_for_user') close(seg, at);
    if (finished) closeAll(row, at, status === 'cancelled' ? 'cancelled' : 'failed');
  }
}

/** Titles and order from the job view (the stream names steps by id only); in fallback, the bars too. */
export function applyView(model, view) {
  const steps = (view && view.steps) || [];
  for (const s of steps) {
    const row = rowOf(model, String(s.id), s.kind);
    row.title = s.title || row.title;
    if (model.source !== 'events') coarseRow(row, s);
    else if (row.fromView || (!row.segments.length && ms(s.started_at) !== null)) {
      // A step the stream has no events of (a parallel branch, a join: they run in parts of the run or in the
      // orchestrator itself) is drawn from the view, as in the fallback, instead of saying "not started".
      coarseRow(row, s);
      row.fromView = true;
    }
  }
  const known = steps.map((s) => String(s.id));
  // Rows the plan does not list (the planning itself) come first: they ran first.
  model.order = [...model.order.filter((id) => !known.includes(id)), ...known];
  if (model.source !== 'events') {
    model.source = 'view';
    model.status = view.status;
    model.finished = view.finished === true;
    const starts = steps.map((s) => ms(s.started_at)).filter((t) => t !== null);
    const created = ms(view.created_at);
    model.t0 = created !== null ? created : starts.length ? Math.min(...starts) : null;
    const ends = [model.t0, ...steps.flatMap((s) => [ms(s.started_at), ms(s.ended_at)])].filter((t) => t !== null);
    model.tLast = ends.length ? Math.max(...ends) : null;
    model.endAt = model.finished ? Math.max(model.tLast || 0, ms(view.updated_at) || 0) : null;
  }
}

/** A step drawn from the view alone: one bar for all its attempts, and its human wait when it waits now. */
function coarseRow(row, s) {
  row.state = s.state;
  row.attempts = s.attempts || 0;
  row.error = s.error || null;
  row.segments = [];
  const start = ms(s.started_at);
  const since = ms(s.waiting_since);
  if (start !== null) {
    const paused = s.state === 'retrying' || s.state === 'waiting';
    const state = paused ? 'failed' : FINISHED.has(s.state) ? s.state : 'running';
    // A step that waits now ran until its wait began (or, waiting out a backoff, until its last failure).
    const end = ms(s.ended_at) ?? (s.state === 'waiting' && since !== null ? since : paused ? Math.min(Date.now(), ms(s.retry_at) ?? Date.now()) : null);
    row.segments.push({ kind: 'attempt', attempt: row.attempts || 1, start, end: end === null ? null : Math.max(start, end), state, coarse: true });
  }
  if (s.state === 'waiting' && since !== null) row.segments.push({ kind: 'human', start: since, end: null, state: 'waiting' });
  if (s.state === 'retrying' && ms(s.retry_at) !== null) {
    const from = Math.min(ms(s.retry_at), Date.now());
    row.segments.push({ kind: 'retry', attempt: s.next_attempt || row.attempts + 1, start: from, end: null, planned: ms(s.retry_at), state: 'waiting' });
  }
}

/** Whether a bar is still growing (the job has not ended and something is open). */
export function isLive(model) {
  if (model.endAt !== null || model.finished) return false;
  for (const row of model.rows.values()) if (row.segments.some((s) => s.end === null)) return true;
  return false;
}

// ----- rendering -------------------------------------------------------------------------------------

function tickStep(span) {
  return TICK_STEPS.find((step) => span / step <= MAX_TICKS) || TICK_STEPS[TICK_STEPS.length - 1];
}

function place(node, start, end, t0, span) {
  const left = ((start - t0) / span) * 100;
  const width = Math.max(0, ((end - start) / span) * 100);
  node.style.left = `${Math.min(100, Math.max(0, left)).toFixed(3)}%`;
  node.style.width = `${Math.min(100 - Math.max(0, left), width).toFixed(3)}%`;
}

function segmentLabel(seg, end) {
  const took = fmtSpan(end - seg.start);
  if (seg.kind === 'attempt') {
    const state = seg.end === null ? 'running' : seg.state;
    return `Attempt ${seg.attempt}${seg.coarse && seg.attempt > 1 ? ` (all ${seg.attempt} attempts)` : ''}: ${state}, ${took}${seg.error && seg.error.code ? ` (${seg.error.code})` : ''}`;
  }
  if (seg.kind === 'retry') return `Retry wait before attempt ${seg.attempt}: ${took}${seg.end === null ? ' so far' : ''}`;
  return `Waiting for a person: ${took}${seg.end === null ? ' so far' : ''}`;
}

function bar(seg, now, t0, span) {
  const end = seg.end === null ? Math.max(seg.start, now) : seg.end;
  const label = segmentLabel(seg, end);
  const node = el('span', {
    class: `tl-bar tl-${seg.kind} tl-${seg.end === null ? 'open' : 'closed'} tl-state-${seg.end === null && seg.kind === 'attempt' ? 'running' : seg.state}`,
    role: 'img',
    'aria-label': label,
    title: label,
    dataset: { kind: seg.kind, attempt: seg.attempt ? String(seg.attempt) : '', state: seg.end === null && seg.kind === 'attempt' ? 'running' : seg.state, open: String(seg.end === null), ms: String(Math.round(end - seg.start)) },
  });
  place(node, seg.start, end, t0, span);
  return node;
}

function rowSummary(row, now) {
  const attempts = row.segments.filter((s) => s.kind === 'attempt');
  const spent = (kind) => row.segments.filter((s) => s.kind === kind).reduce((sum, s) => sum + ((s.end === null ? now : s.end) - s.start), 0);
  const parts = [];
  const count = attempts.length && !attempts[0].coarse ? attempts.length : row.attempts;
  if (count) parts.push(`${count} attempt${count === 1 ? '' : 's'}`);
  if (attempts.length) parts.push(fmtSpan(spent('attempt')));
  if (row.segments.some((s) => s.kind === 'retry')) parts.push(`retry wait ${fmtSpan(spent('retry'))}`);
  if (row.segments.some((s) => s.kind === 'human')) parts.push(`waited ${fmtSpan(spent('human'))}`);
  if (!parts.length) parts.push(row.state === 'skipped' ? 'skipped' : 'not started');
  return parts.join(' · ');
}

function axis(t0, span) {
  const step = tickStep(span);
  const ticks = [];
  for (let t = 0; t <= span; t += step) {
    // A tick near the right end writes its label to the left of its line: it never widens the chart.
    const tick = el('span', { class: t / span > 0.85 ? 'tl-tick tl-tick-end' : 'tl-tick', text: fmtSpan(t) });
    tick.style.left = `${((t / span) * 100).toFixed(3)}%`;
    ticks.push(tick);
  }
  return el('div', { class: 'tl-axis', 'aria-hidden': 'true' }, el('span', { class: 'tl-label' }), el('span', { class: 'tl-track' }, ticks));
}

function legend() {
  return el(
    'ul',
    { class: 'tl-legend', 'aria-label': 'Legend' },
    LEGEND.map(([kind, state, text]) => el('li', {}, el('span', { class: `tl-swatch tl-${kind} tl-state-${state}`, 'aria-hidden': 'true' }), text)),
  );
}

function rowNode(row, now, t0, span) {
  const name = `${row.id}${row.kind ? ` · ${row.kind}` : ''}${row.tools.length ? ` · ${row.tools.join(', ')}` : ''}`;
  return el(
    'li',
    { class: 'tl-row', dataset: { stepId: row.id, state: row.state || '' } },
    el('span', { class: 'tl-label', title: row.title || null }, el('span', { class: 'tl-name', text: name }), el('span', { class: 'tl-summary muted', text: rowSummary(row, now) })),
    el('span', { class: 'tl-track' }, row.segments.map((seg) => bar(seg, now, t0, span))),
  );
}

/** The timeline as a card (null when nothing started yet). */
export function renderTimeline(model, now = Date.now()) {
  const rows = model.order.map((id) => model.rows.get(id)).filter(Boolean);
  if (model.t0 === null || !rows.length) return null;
  const end = model.endAt !== null ? model.endAt : Math.max(now, model.tLast || model.t0);
  const span = Math.max(MIN_SPAN_MS, end - model.t0);
  const coarse = model.source === 'view';
  return el(
    'section',
    { class: 'card timeline-card', 'aria-labelledby': 'timeline-title', id: 'timeline', dataset: { source: model.source || '' } },
    el('h3', { id: 'timeline-title', text: 'Timeline' }),
    el('p', { class: 'muted small', text: `${fmtSpan(end - model.t0)} from the job's start${model.endAt !== null ? ' to its end' : ' so far'}${coarse ? ' · from the job view: one bar per step, its attempts not told apart' : ''}.` }),
    legend(),
    el('div', { class: 'tl-chart', role: 'group', 'aria-label': 'Steps on a time axis' }, axis(model.t0, span), el('ol', { class: 'tl-rows' }, rows.map((row) => rowNode(row, end, model.t0, span)))),
  );
}

/**
 * A timeline living in ``slot``: fed with events and views, it draws itself again on each change and, while a bar
 * is open, every half second (only the page's clock ticks; nothing is fetched).
 */
export function createTimeline(slot) {
  const model = newModel();
  let timer = null;
  // How far the page's clock is ahead of the server's: the current `status` event is stamped with the server's now.
  let skew = 0;
  const draw = () => {
    const card = renderTimeline(model, Date.now() - skew);
    slot.replaceChildren(...(card ? [card] : []));
    slot.hidden = !card;
    if (isLive(model) && timer === null) timer = setInterval(draw, TICK_MS);
    if (!isLive(model) && timer !== null) {
      clearInterval(timer);
      timer = null;
    }
  };
  return {
    model,
    event(type, data) {
      if (type === 'status' && data.committed === false && ms(data.at) !== null) skew = Date.now() - ms(data.at);
      applyEvent(model, type, data);
      draw();
    },
    view(v) {
      applyView(model, v);
      draw();
    },
    stop() {
      if (timer !== null) clearInterval(timer);
      timer = null;
    },
  };
}

// ----- the answer as it is written --------------------------------------------------------------------

/** The provisional answer text per (step, attempt): deltas write at their offset, `superseded` voids an attempt. */
export function createDraft() {
  const texts = new Map();
  let latest = null;
  const key = (data) => `${data.step_id}\u0000${data.attempt}`;
  return {
    add(data) {
      if (typeof data.text !== 'string') return;
      const k = key(data);
      const entry = texts.get(k) || { step: String(data.step_id), attempt: data.attempt, text: '', void: false };
      if (entry.void) return;
      // `text` belongs at character `offset` of the attempt's answer, replacing what was there from it on.
      const offset = Number.isInteger(data.offset) ? Math.min(data.offset, entry.text.length) : entry.text.length;
      entry.text = entry.text.slice(0, offset) + data.text;
      texts.set(k, entry);
      latest = k;
    },
    supersede(data) {
      const k = key(data);
      texts.set(k, { step: String(data.step_id), attempt: data.attempt, text: '', void: true });
      if (latest === k) latest = null;
    },
    /** The text being written now: the latest attempt that still has text. */
    current() {
      const entry = latest === null ? null : texts.get(latest);
      return entry && entry.text ? { step: entry.step, attempt: entry.attempt, text: entry.text, chars: entry.text.length } : null;
    },
  };
}

// Follow one job's event stream (GET /api/jobs/{id}/events, text/event-stream) with EventSource.
// EventSource reconnects by itself after a network break, sending Last-Event-ID; after the server's
// `reconnect` event (its maximum stream duration) the stream is opened again at once with ?after=<last id>.
// A stream that cannot be opened at all (an HTTP error, no such endpoint) is reported as unavailable, and the
// console polls the job view instead.

export const EVENT_TYPES = ['status', 'step', 'log', 'question', 'tool_call', 'delta', 'superseded', 'usage', 'end', 'reconnect'];
// A stream that breaks this many times in a row without a single event in between is given up.
const MAX_SILENT_FAILURES = 5;

/**
 * Open the stream at ``url`` (which may carry ?code=<key>), after the event id ``handlers.after`` when given;
 * handlers: onEvent(type, data, id), onOpen(), onBreak() (a break EventSource is reconnecting from),
 * onUnavailable(), onEnd(data). Returns { close, lastId }.
 */
export function followStream(url, handlers) {
  let source = null;
  let lastId = null;
  let finished = false;
  let failures = 0;
  let sawEvent = false;

  const listen = (type) => (msg) => {
    if (finished || msg.target !== source) return;
    if (msg.lastEventId) lastId = msg.lastEventId;
    failures = 0;
    sawEvent = true;
    let data;
    try {
      data = JSON.parse(msg.data);
    } catch {
      return; // not an event of the documented format: nothing to show
    }
    if (!data || typeof data !== 'object') return;
    if (type === 'reconnect') {
      // The server ends streams after their maximum duration: pick up where this one stopped.
      open(typeof data.after === 'string' && data.after ? data.after : lastId);
      return;
    }
    handlers.onEvent(type, data, msg.lastEventId || null);
    if (type === 'end') {
      stop();
      if (handlers.onEnd) handlers.onEnd(data);
    }
  };

  const onError = (event) => {
    if (finished || event.target !== source) return;
    failures += 1;
    if (source.readyState === EventSource.CLOSED || failures > MAX_SILENT_FAILURES) {
      // Refused (HTTP error or not an event stream) or broken again and again: the view is polled instead.
      stop();
      if (handlers.onUnavailable) handlers.onUnavailable({ sawEvent, lastId });
      return;
    }
    if (handlers.onBreak) handlers.onBreak({ lastId });
  };

  function open(after) {
    if (source) source.close();
    const target = after ? `${url}${url.includes('?') ? '&' : '?'}after=${encodeURIComponent(after)}` : url;
    source = new EventSource(target);
    for (const type of EVENT_TYPES) source.addEventListener(type, listen(type));
    source.addEventListener('open', (event) => {
      if (event.target === source && handlers.onOpen) handlers.onOpen();
    });
    source.addEventListener('error', onError);
  }

  function stop() {
    finished = true;
    if (source) source.close();
  }

  open(handlers.after || null);
  return {
    close: stop,
    lastId: () => lastId,
  };
}

// A session's event stream read with fetch(): EventSource cannot send the Authorization header.
// A small Server-Sent Events parser, and a feed that reconnects with Last-Event-ID so that
// nothing is lost or shown twice.

import { authFailed, authHeaders, errorOf, isAuthRefusal, sessionPath } from './api.js';

/** Splits a text/event-stream into frames {id, event, data}; comments are skipped. */
export class SseParser {
  constructor() {
    this.buf = '';
    this.reset();
  }

  reset() {
    this.id = null;
    this.event = '';
    this.data = [];
  }

  /** Feeds decoded text; returns the frames it completed. */
  feed(text) {
    this.buf += text;
    const frames = [];
    let nl;
    while ((nl = this.buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buf.slice(0, nl);
      const len = this.buf.startsWith('\r\n', nl) ? 2 : 1;
      // A lone \r at the end may be the first half of \r\n: wait for more.
      if (len === 1 && this.buf[nl] === '\r' && nl === this.buf.length - 1) break;
      this.buf = this.buf.slice(nl + len);
      if (line === '') {
        if (this.data.length || this.event) {
          frames.push({ id: this.id, event: this.event || 'message', data: this.data.join('\n') });
        }
        this.reset();
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') this.data.push(value);
      else if (field === 'event') this.event = value;
      else if (field === 'id') this.id = value;
    }
    return frames;
  }
}

const wait = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    });
  });

/**
 * Follows a session's events from seq `after` (null: from its first event), across dropped
 * connections. Callbacks: onEvent(ev, {replayed}) for each event, onBatch() after each chunk of
 * the network (a moment to save state), onState('live'|'reconnecting'|'ended', detail),
 * onRestart() when the daemon no longer has the cursor (the view must be rebuilt).
 */
export class EventFeed {
  constructor(sessionId, after, handlers) {
    this.sessionId = sessionId;
    this.lastSeq = after;
    this.h = handlers;
    this.stopper = new AbortController();
  }

  start() {
    this.loop();
    return this;
  }

  stop() {
    this.stopper.abort();
  }

  get stopped() {
    return this.stopper.signal.aborted;
  }

  async loop() {
    let failures = 0;
    while (!this.stopped) {
      const outcome = await this.connectOnce().catch((e) => ({ retry: true, why: String(e?.message || e) }));
      if (this.stopped || !outcome.retry) return;
      if (outcome.connected) failures = 0;
      // Back off after failures (0.5, 1, 2, 4 s at most); a reset or a clean end reconnects at once.
      const delay = outcome.immediate ? 0 : Math.min(4000, 500 * 2 ** Math.min(failures, 3));
      failures += outcome.immediate ? 0 : 1;
      this.h.onState?.('reconnecting', outcome.why || '');
      await wait(delay, this.stopper.signal);
    }
  }

  async connectOnce() {
    const headers = authHeaders({ Accept: 'text/event-stream' });
    if (this.lastSeq != null) headers['Last-Event-ID'] = String(this.lastSeq);
    const resp = await fetch(sessionPath(this.sessionId, '/events'), {
      headers,
      cache: 'no-store',
      signal: this.stopper.signal,
    });
    if (!resp.ok) {
      const err = await errorOf(resp);
      if (isAuthRefusal(resp)) {
        authFailed(err);
        return { retry: false };
      }
      if (resp.status === 404) {
        this.h.onState?.('ended', err.message);
        return { retry: false };
      }
      return { retry: true, why: err.message };
    }
    this.h.onState?.('live', '');
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    const parser = new SseParser();
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (e) {
        // The connection broke: a frame cut in half is dropped, the next connection starts after
        // the last whole event.
        return { retry: true, connected: true, why: 'connection lost' };
      }
      if (chunk.done) return { retry: true, connected: true, immediate: true };
      for (const frame of parser.feed(decoder.decode(chunk.value, { stream: true }))) {
        if (this.stopped) return { retry: false };
        const verdict = this.frame(frame);
        if (verdict) {
          this.h.onBatch?.();
          reader.cancel().catch(() => {});
          return verdict;
        }
      }
      this.h.onBatch?.();
    }
  }

  /** Handles one frame; returns a verdict when the connection must be given up. */
  frame(frame) {
    let ev;
    try {
      ev = JSON.parse(frame.data);
    } catch {
      return null;
    }
    if (ev.type === 'reset') {
      // fromSeq 1 past a cursor: the daemon does not know our cursor (another database). Else we
      // fell behind and were dropped: come back from the cursor.
      if (ev.fromSeq <= 1 && this.lastSeq) {
        this.h.onRestart?.();
        return { retry: false };
      }
      return { retry: true, connected: true, immediate: true, why: 'fell behind' };
    }
    if (frame.id != null && frame.id !== '') {
      const seq = Number(frame.id);
      // Never twice: a replay overlapping what we hold is skipped.
      if (this.lastSeq != null && seq <= this.lastSeq) return null;
      this.lastSeq = seq;
    }
    // Frames without an id (a pending permission request announced again) leave the cursor.
    this.h.onEvent(ev);
    return null;
  }
}

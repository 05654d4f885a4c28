// One session: its stored history (GET …/messages), then its live event stream, a Stop button
// and a composer for the next prompt.
//
// The last seq seen and what the stream has shown of the runs still going on are kept in
// sessionStorage: after a reload the page draws the history, puts back the partial answers,
// and reconnects with Last-Event-ID = that seq, so the text goes on without a gap or a repeat.

import { ApiError, canAnswer, canSteer, get, post, sessionPath } from './api.js';
import { append, h, when } from './dom.js';
import { EventFeed } from './sse.js';
import { Transcript } from './transcript.js';

const STATE_PREFIX = 'elfgate.feed.';
// What is kept of a finished run: the events that are not in its stored messages.
const KEEP_AFTER_COMPLETE = new Set(['init', 'result', 'complete', 'error', 'retry', 'processing']);

/** The stream state of one session in sessionStorage: {seq, events}. */
class SavedFeed {
  constructor(sessionId) {
    this.key = STATE_PREFIX + sessionId;
    let saved = null;
    try {
      saved = JSON.parse(sessionStorage.getItem(this.key) || 'null');
    } catch {
      saved = null;
    }
    this.seq = Number.isInteger(saved?.seq) ? saved.seq : null;
    this.events = Array.isArray(saved?.events) ? saved.events : [];
  }

  /** Records an event; messages are left out (the history has them), deltas are merged. */
  add(ev) {
    const run = ev.runId;
    if (ev.type === 'userMessage' || ev.type === 'sessionCreated') return;
    if (ev.type === 'assistantMessage') {
      // What streamed before it is now a stored message.
      this.events = this.events.filter((e) => !(e.type === 'streamDelta' && e.runId === run));
      return;
    }
    if (ev.type === 'complete') {
      this.events = this.events.filter((e) => e.runId !== run || KEEP_AFTER_COMPLETE.has(e.type));
    }
    const last = this.events[this.events.length - 1];
    if (ev.type === 'streamDelta' && last?.type === 'streamDelta' && last.runId === run && last.delta.kind === ev.delta.kind) {
      last.delta = { kind: last.delta.kind, text: last.delta.text + ev.delta.text };
      return;
    }
    this.events.push(ev.type === 'streamDelta' ? { ...ev, delta: { ...ev.delta } } : ev);
  }

  save(seq) {
    this.seq = seq;
    try {
      sessionStorage.setItem(this.key, JSON.stringify({ seq, events: this.events }));
    } catch {
      // Storage full: a reload then replays the stream from its start instead.
      sessionStorage.removeItem(this.key);
    }
  }

  forget() {
    sessionStorage.removeItem(this.key);
    this.seq = null;
    this.events = [];
  }
}

export class SessionView {
  constructor(main, sessionId, { notice, me }) {
    this.main = main;
    this.id = sessionId;
    this.notice = notice;
    // A viewer reads: no Stop, no composer, no permission answers (the daemon would refuse
    // them; the page does not offer them).
    this.steers = canSteer(me);
    this.answers = canAnswer(me);
    this.closed = false;
  }

  async open() {
    const { main } = this;
    this.title = h('h1', { class: 'session-title' }, 'Session');
    this.meta = h('p', { class: 'meta' });
    this.status = h('span', { class: 'status', role: 'status', 'aria-live': 'polite' }, '');
    this.stopBtn = h('button', { type: 'button', class: 'stop', onclick: () => this.stop(), disabled: true, hidden: !this.steers }, 'Stop');
    this.conn = h('span', { class: 'conn' }, '');
    const log = h('div', {
      class: 'transcript',
      role: 'log',
      'aria-live': 'polite',
      'aria-relevant': 'additions',
      'aria-label': 'Conversation',
    });
    this.transcript = new Transcript(log, {
      answer: this.answers ? (rid, decision, scope) => post(sessionPath(this.id, `/permissions/${encodeURIComponent(rid)}`), { decision, scope }) : null,
      onStatus: (s) => this.setStatus(s),
    });
    this.prompt = h('textarea', { id: 'composer-prompt', name: 'prompt', rows: 3, required: true });
    this.onBusy = h(
      'select',
      { id: 'composer-onbusy', name: 'onBusy' },
      h('option', { value: 'reject' }, 'refuse it (tell me)'),
      h('option', { value: 'enqueue' }, 'queue it after the run'),
      h('option', { value: 'interrupt' }, 'interrupt the run'),
    );
    this.sendError = h('p', { class: 'form-error', role: 'alert' });
    const composer = h(
      'form',
      { class: 'composer', 'aria-label': 'Next message', onsubmit: (e) => this.send(e) },
      h('label', { for: 'composer-prompt' }, 'Message'),
      this.prompt,
      h('div', { class: 'row' }, h('label', { for: 'composer-onbusy' }, 'If a run is going on:'), this.onBusy, h('button', { type: 'submit' }, 'Send')),
      this.sendError,
    );
    this.prompt.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) composer.requestSubmit();
    });
    const readOnly = h('p', { class: 'read-only', role: 'note' }, 'This key is a viewer’s: it reads this session; it cannot send to it, stop it or answer its permission requests.');
    main.replaceChildren(
      h('section', { class: 'session-view', 'aria-labelledby': 'session-title' },
        h('div', { class: 'session-head' }, h('div', {}, this.title, this.meta), h('div', { class: 'controls' }, this.status, this.stopBtn)),
        log,
        this.steers ? composer : readOnly,
        h('p', { class: 'conn-line' }, this.conn),
      ),
    );
    this.title.id = 'session-title';
    await this.load();
  }

  async load() {
    this.saved = new SavedFeed(this.id);
    let session;
    let history;
    try {
      [session, history] = await Promise.all([get(sessionPath(this.id)), get(sessionPath(this.id, '/messages'))]);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) this.saved.forget();
      this.transcript.root.replaceChildren(h('p', { class: 'form-error', role: 'alert' }, `Cannot open this session: ${e.message}`));
      return;
    }
    if (this.closed) return;
    this.session = session;
    const firstPrompt = history.messages.find((m) => m.role === 'user')?.blocks?.find((b) => b.type === 'text')?.text;
    this.title.textContent = session.title || firstPrompt || 'Untitled session';
    this.meta.replaceChildren(
      append(h('span'), [
        [session.engine, session.providerId, session.model, session.cliBackend].filter(Boolean).join(' · '),
        session.projectPath ? h('span', { class: 'path' }, ` · ${session.projectPath}`) : null,
        ` · started ${when(session.createdAt)}`,
      ]),
    );
    this.setStatus(session.status);
    for (const m of history.messages) this.transcript.message(m);
    // Put back what the stream had shown of the runs going on when the page was left.
    for (const ev of this.saved.events) this.transcript.event(ev);
    this.follow(this.saved.seq);
  }

  follow(after) {
    this.feed = new EventFeed(this.id, after, {
      onEvent: (ev) => {
        this.transcript.event(ev);
        this.saved.add(ev);
      },
      onBatch: () => this.saved.save(this.feed.lastSeq),
      onState: (state, why) => {
        this.conn.textContent = state === 'live' ? '' : state === 'reconnecting' ? `Reconnecting… ${why}` : `Stream ended: ${why}`;
      },
      onRestart: () => {
        // The daemon does not know our cursor: draw everything again from the start.
        this.saved.forget();
        this.transcript.reset();
        this.load();
      },
    }).start();
  }

  setStatus(s) {
    this.status.textContent = s || '';
    this.status.dataset.status = s || '';
    const running = s === 'running' || s === 'waiting for permission';
    this.stopBtn.disabled = !running || !this.steers;
  }

  async stop() {
    this.stopBtn.disabled = true;
    this.status.textContent = 'stopping…';
    try {
      await post(sessionPath(this.id, '/interrupt'), {});
    } catch (e) {
      this.notice(`Could not stop the run: ${e.message}`);
      this.status.textContent = this.status.dataset.status || '';
      this.stopBtn.disabled = false;
    }
  }

  async send(e) {
    e.preventDefault();
    const prompt = this.prompt.value;
    if (!prompt.trim()) return;
    this.sendError.textContent = '';
    try {
      await post(sessionPath(this.id, '/messages'), { prompt, onBusy: this.onBusy.value });
      this.prompt.value = '';
    } catch (err) {
      this.sendError.textContent =
        err.code === 'busy' ? 'A run is going on: choose to queue the message or to interrupt the run, and send it again.' : `Not sent: ${err.message}`;
    }
  }

  close() {
    this.closed = true;
    this.feed?.stop();
  }
}

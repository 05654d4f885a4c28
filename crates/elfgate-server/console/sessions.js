// The sessions list: newest first, a page at a time (GET /v1/sessions?limit=&cursor=), with a
// search box over the sessions loaded so far (the API has no search).

import { canSteer, get } from './api.js';
import { h, when } from './dom.js';

const PAGE = 50;

export class SessionsView {
  constructor(main, { me } = {}) {
    this.main = main;
    this.me = me;
    this.sessions = [];
    this.cursor = null;
    this.closed = false;
  }

  async open() {
    this.search = h('input', { id: 'session-search', type: 'search', placeholder: 'title, prompt, engine, model…', autocomplete: 'off' });
    this.search.addEventListener('input', () => this.draw());
    this.list = h('ul', { class: 'sessions', 'aria-label': 'Sessions' });
    this.more = h('button', { type: 'button', class: 'more', hidden: true, onclick: () => this.loadPage() }, 'Load more');
    this.count = h('p', { class: 'count', role: 'status', 'aria-live': 'polite' });
    this.main.replaceChildren(
      h('section', { class: 'sessions-view', 'aria-labelledby': 'sessions-title' },
        h('div', { class: 'list-head' },
          h('h1', { id: 'sessions-title' }, 'Sessions'),
          canSteer(this.me) ? h('a', { class: 'button', href: '#/new' }, 'New session') : null,
        ),
        h('div', { class: 'search' }, h('label', { for: 'session-search' }, 'Search'), this.search),
        this.count,
        this.list,
        this.more,
      ),
    );
    await this.loadPage();
  }

  async loadPage() {
    this.more.disabled = true;
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (this.cursor) q.set('cursor', this.cursor);
    let page;
    try {
      page = await get(`/v1/sessions?${q}`);
    } catch (e) {
      this.count.textContent = `Cannot list sessions: ${e.message}`;
      return;
    }
    if (this.closed) return;
    this.sessions.push(...page.sessions);
    this.cursor = page.nextCursor || null;
    this.more.hidden = !this.cursor;
    this.more.disabled = false;
    this.draw();
  }

  label(s) {
    // The list carries each session's first prompt: no request per untitled session.
    return s.title || s.firstPrompt || '(no title)';
  }

  draw() {
    const needle = this.search.value.trim().toLowerCase();
    const shown = this.sessions.filter((s) =>
      !needle || [this.label(s), s.engine, s.model, s.providerId, s.id, s.projectPath].some((x) => (x || '').toLowerCase().includes(needle)),
    );
    this.list.replaceChildren(
      ...shown.map((s) =>
        h('li', { class: 'session-item', 'data-session': s.id },
          h('a', { href: `#/s/${encodeURIComponent(s.id)}`, class: 'session-link' }, oneLine(this.label(s))),
          h('div', { class: 'session-meta' },
            h('span', { class: 'engine' }, s.engine),
            s.owner ? h('span', { class: 'owner' }, s.visibility === 'private' ? `${s.owner} (private)` : s.owner) : null,
            s.model ? h('span', { class: 'model' }, [s.providerId, s.model].filter(Boolean).join('/')) : null,
            h('span', { class: `badge ${s.status}` }, s.queuedRuns ? `${s.status} (+${s.queuedRuns} queued)` : s.status),
            h('time', { datetime: s.updatedAt }, when(s.updatedAt)),
          ),
        ),
      ),
    );
    const total = this.sessions.length;
    this.count.textContent = needle
      ? `${shown.length} of ${total} loaded sessions match`
      : total
        ? `${total} session${total === 1 ? '' : 's'}${this.cursor ? ' loaded (more below)' : ''}`
        : 'No sessions yet.';
  }

  close() {
    this.closed = true;
  }
}

function oneLine(text) {
  const t = text.replace(/\s+/g, ' ').trim();
  return t.length > 140 ? `${t.slice(0, 139)}…` : t;
}

// A session's transcript: stored messages and live events drawn into one list of runs. Stored
// history and the replayed stream overlap; items carry ids (message ids, tool call ids,
// permission request ids), so each is drawn once. Every text goes in through text nodes or the
// Markdown renderer, which builds nodes.

import { h, clear, pretty, when } from './dom.js';
import { markdown } from './markdown.js';

const FINISH = {
  stop: 'completed',
  max_iterations: 'stopped at the iteration limit',
  interrupted: 'interrupted',
  error: 'failed',
  daemon_restart: 'ended by a daemon restart',
};

export class Transcript {
  /**
   * `answer(requestId, decision, scope)` posts a permission answer (returns a promise); null
   * when the key may not answer (the cards then only show the request).
   */
  constructor(root, { answer, onStatus }) {
    this.root = root;
    this.answer = answer;
    this.onStatus = onStatus || (() => {});
    this.runs = new Map();
    this.messages = new Set();
    this.tools = new Map();
    this.permissions = new Map();
  }

  /** The section of run `runId` (created at the end when new). */
  run(runId) {
    const key = runId || 'none';
    let r = this.runs.get(key);
    if (!r) {
      const body = h('div', { class: 'run-body' });
      const footer = h('div', { class: 'run-footer' });
      const el = h('section', { class: 'run', 'data-run': key, 'aria-label': 'Run' }, body, footer);
      this.root.append(el);
      r = { el, body, footer, drafts: {}, stats: null, finish: null };
      this.runs.set(key, r);
    }
    return r;
  }

  /** A stored message (from the history or an event); drawn once, before `anchor` if given. */
  message(msg, anchor = null) {
    if (!msg || this.messages.has(msg.id)) return false;
    this.messages.add(msg.id);
    const r = this.run(msg.runId);
    const role = msg.role || 'assistant';
    if (role === 'tool') {
      for (const b of msg.blocks || []) if (b.type === 'tool_result') this.toolResult(r, b, null);
      return true;
    }
    const el = h('article', { class: `msg ${role}`, 'data-message': msg.id });
    el.append(h('div', { class: 'who' }, role === 'user' ? 'You' : role === 'system' ? 'System' : 'Assistant'));
    const content = h('div', { class: 'content' });
    el.append(content);
    let cards = [];
    for (const b of msg.blocks || []) {
      if (b.type === 'text') {
        // What the user typed is shown as typed; answers as Markdown.
        content.append(role === 'user' ? h('p', { class: 'plain' }, b.text) : h('div', { class: 'md' }, markdown(b.text)));
      } else if (b.type === 'thinking') {
        // A block may hold only the provider's signature (Gemini's, on a function call).
        if (b.thinking) content.append(thinking(b.thinking, false));
      } else if (b.type === 'tool_use') {
        cards.push(b);
      } else if (b.type === 'tool_result') {
        this.toolResult(r, b, null);
      } else if (b.type === 'image') {
        content.append(h('p', { class: 'note' }, `[image ${b.media_type || ''}]`));
      }
    }
    if (content.childNodes.length) {
      if (anchor?.parentNode === r.body) anchor.before(el);
      else r.body.append(el);
    }
    for (const b of cards) this.toolStart(r, b);
    return true;
  }

  /** Applies one event of the stream. */
  event(ev) {
    if (ev.type === 'sessionCreated' || ev.type === 'reset') return;
    const r = this.run(ev.runId);
    switch (ev.type) {
      case 'init': {
        const i = ev.systemInfo || {};
        const what = [i.engine, i.provider, i.model, i.cliBackend, i.toolRun && `tool ${i.toolRun}`].filter(Boolean).join(' · ');
        r.el.dataset.info = what;
        r.footer.replaceChildren(h('span', { class: 'badge running' }, 'running'));
        this.onStatus('running');
        break;
      }
      case 'userMessage':
        this.message(ev.message);
        break;
      case 'assistantMessage': {
        // The stored answer takes the place of what streamed for it.
        const anchor = r.drafts.thinking || r.drafts.text;
        this.message(ev.message, anchor);
        this.settleDrafts(r);
        break;
      }
      case 'streamDelta':
        this.delta(r, ev.delta);
        break;
      case 'toolCallStart':
        this.toolStart(r, ev.block);
        break;
      case 'toolCallEnd':
        this.toolResult(r, ev.block, ev.status);
        break;
      case 'permissionRequest':
        this.permission(r, ev);
        break;
      case 'permissionResolved':
        this.resolved(ev.requestId, ev.decision);
        break;
      case 'retry': {
        const x = ev.retry || {};
        r.body.append(h('p', { class: 'note retry' }, `Retrying (${x.attempt}/${x.maxAttempts}) in ${((x.delayMs || 0) / 1000).toFixed(1)} s: ${x.reason || ''}`));
        break;
      }
      case 'error':
        r.body.append(
          h('p', { class: 'note error', role: 'alert' }, `Error (${ev.error?.code || 'error'}): ${ev.error?.message || ''}`),
        );
        break;
      case 'processing':
        r.body.append(h('p', { class: 'note' }, ev.message || ''));
        break;
      case 'result':
        r.stats = ev.stats;
        break;
      case 'complete':
        this.complete(r, ev.finishReason);
        break;
      default:
        break;
    }
  }

  delta(r, delta) {
    if (!delta || !delta.text) return;
    const kind = delta.kind === 'thinking' ? 'thinking' : 'text';
    let d = r.drafts[kind];
    if (!d) {
      if (kind === 'thinking') {
        d = thinking('', true);
        d.target = d.querySelector('.thinking-text');
      } else {
        const target = h('p', { class: 'plain draft-text' });
        d = h('article', { class: 'msg assistant draft', 'aria-busy': 'true' }, h('div', { class: 'who' }, 'Assistant'), h('div', { class: 'content' }, target));
        d.target = target;
      }
      r.drafts[kind] = d;
      r.body.append(d);
    }
    // One text node per piece: the answer grows as it streams.
    d.target.append(document.createTextNode(delta.text));
  }

  /** The stored answer replaces what was streamed for it. */
  settleDrafts(r) {
    for (const d of Object.values(r.drafts)) d.remove();
    r.drafts = {};
  }

  toolStart(r, block) {
    if (!block || !block.id) return;
    let card = this.tools.get(block.id);
    if (!card) {
      card = toolCard(block);
      this.tools.set(block.id, card);
      r.body.append(card);
    }
  }

  toolResult(r, block, status) {
    if (!block) return;
    let card = this.tools.get(block.tool_use_id);
    if (!card) {
      card = toolCard({ id: block.tool_use_id, name: 'tool', input: null });
      this.tools.set(block.tool_use_id, card);
      r.body.append(card);
    }
    const st = status || (block.is_error ? 'error' : 'success');
    card.dataset.status = st;
    card.querySelector('.tool-status').textContent = st;
    const out = card.querySelector('.tool-output');
    out.hidden = false;
    out.querySelector('pre').textContent = block.content ?? '';
  }

  permission(r, ev) {
    if (this.permissions.has(ev.requestId)) return;
    const buttons = h('div', { class: 'actions' });
    const status = h('p', { class: 'perm-status', role: 'status' });
    const card = h(
      'div',
      { class: 'permission', role: 'group', 'aria-label': `Permission for ${ev.toolName}`, 'data-request': ev.requestId },
      h('p', {}, h('strong', {}, ev.toolName), ` asks to run (${ev.tier})`),
      h('pre', { class: 'tool-input' }, pretty(ev.input)),
      ev.expiresAt ? h('p', { class: 'note expiry' }, `Denied if not answered by ${when(ev.expiresAt)}.`) : null,
      buttons,
      status,
    );
    const choose = (decision, scope) => async () => {
      for (const b of buttons.querySelectorAll('button')) b.disabled = true;
      status.textContent = 'Sending…';
      try {
        await this.answer(ev.requestId, decision, scope);
        status.textContent = '';
      } catch (e) {
        status.textContent = `Could not answer: ${e.message}`;
        for (const b of buttons.querySelectorAll('button')) b.disabled = false;
      }
    };
    if (this.answer) {
      buttons.append(
        h('button', { type: 'button', class: 'allow', onclick: choose('allow', 'once') }, 'Allow once'),
        h('button', { type: 'button', class: 'allow-session', onclick: choose('allow', 'session') }, 'Allow for session'),
        h('button', { type: 'button', class: 'deny', onclick: choose('deny', 'once') }, 'Deny'),
      );
    } else {
      status.textContent = 'Waiting for someone who may answer.';
    }
    this.permissions.set(ev.requestId, card);
    r.body.append(card);
    this.onStatus('waiting for permission');
  }

  resolved(requestId, decision) {
    const card = this.permissions.get(requestId);
    if (!card) return;
    card.dataset.decision = decision;
    card.querySelector('.actions')?.remove();
    card.querySelector('.expiry')?.remove();
    card.querySelector('.perm-status').textContent = decision === 'allow' ? 'Allowed' : 'Denied';
    if (![...this.permissions.values()].some((c) => !c.dataset.decision)) this.onStatus('running');
  }

  complete(r, finishReason) {
    // Whatever still streams belongs to the run that ended: keep it as it is.
    for (const d of Object.values(r.drafts)) d.removeAttribute('aria-busy');
    r.drafts = {};
    r.finish = finishReason;
    const s = r.stats;
    const parts = [];
    if (s) {
      parts.push(`${s.inputTokens} in · ${s.outputTokens} out tokens`);
      if (s.cacheReadTokens) parts.push(`${s.cacheReadTokens} cached`);
      if (s.iterations > 1) parts.push(`${s.iterations} iterations`);
      parts.push(`${(s.durationMs / 1000).toFixed(1)} s`);
    }
    r.footer.replaceChildren(h('span', { class: `badge ${finishReason}`, 'data-finish': finishReason }, FINISH[finishReason] || finishReason));
    if (parts.length) r.footer.append(h('span', { class: 'stats' }, parts.join(' · ')));
    this.onStatus(finishReason === 'stop' || finishReason === 'max_iterations' ? 'idle' : FINISH[finishReason] || finishReason);
  }

  reset() {
    clear(this.root);
    this.runs.clear();
    this.messages.clear();
    this.tools.clear();
    this.permissions.clear();
  }
}

function thinking(text, live) {
  const body = h('div', { class: 'thinking-text' }, text);
  const d = h('details', { class: 'thinking' }, h('summary', {}, live ? 'Thinking…' : 'Thinking'), body);
  return d;
}

function toolCard(block) {
  return h(
    'div',
    { class: 'tool', 'data-tool': block.id, 'data-status': 'running' },
    h('div', { class: 'tool-head' }, h('span', { class: 'tool-name' }, block.name || 'tool'), h('span', { class: 'tool-status' }, 'running')),
    block.input != null ? h('details', { class: 'tool-in' }, h('summary', {}, 'Input'), h('pre', { class: 'tool-input' }, pretty(block.input))) : null,
    h('div', { class: 'tool-output', hidden: true }, h('pre', {}, '')),
  );
}

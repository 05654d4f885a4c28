// The form that starts a session: engine (GET /v1/engines), provider and model (GET /v1/models),
// project, permission mode, the CLI backend for the cli engine, and the first prompt.

import { canSteer, get, post } from './api.js';
import { h } from './dom.js';

const MODES = ['default', 'acceptEdits', 'bypassPermissions', 'plan'];

/** A random idempotency key (crypto.randomUUID needs a secure context; this does not). */
function clientMsgId() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

function field(id, label, control, hint) {
  control.id = id;
  return h('div', { class: 'field', 'data-field': id },
    h('label', { for: id }, label),
    control,
    hint ? h('small', { id: `${id}-hint` }, hint) : null,
  );
}

export class StartView {
  constructor(main, { navigate, me }) {
    this.main = main;
    this.navigate = navigate;
    this.me = me;
  }

  async open() {
    if (!canSteer(this.me)) {
      this.main.replaceChildren(
        h('section', { class: 'start' },
          h('h1', {}, 'New session'),
          h('p', { class: 'read-only', role: 'note' }, 'This key is a viewer’s: it reads its team’s sessions and starts none.'),
        ),
      );
      return;
    }
    const [engines, models] = await Promise.all([
      get('/v1/engines'),
      get('/v1/models').catch(() => ({ data: [] })),
    ]);
    // Provider default models are listed as PROVIDER/MODEL, owned by the provider.
    const providers = new Map();
    for (const m of models.data || []) {
      if (m.owned_by && m.owned_by !== 'elfgate' && m.id.startsWith(`${m.owned_by}/`)) {
        providers.set(m.owned_by, m.id.slice(m.owned_by.length + 1));
      }
    }
    this.engines = engines.engines;
    const engine = h('select', { name: 'engine' }, this.engines.map((e) => h('option', { value: e.type }, `${e.type} — ${e.description}`)));
    engine.value = this.engines.some((e) => e.type === 'chat') ? 'chat' : this.engines[0]?.type;
    const provider = h('select', { name: 'providerId' },
      h('option', { value: '' }, 'the daemon’s default'),
      [...providers.keys()].map((p) => h('option', { value: p }, p)),
    );
    const modelList = h('datalist', { id: 'model-list' });
    const model = h('input', { name: 'model', type: 'text', list: 'model-list', autocomplete: 'off', placeholder: 'the provider’s default' });
    const fillModels = () => {
      const names = provider.value ? [providers.get(provider.value)] : [...new Set(providers.values())];
      modelList.replaceChildren(...names.filter(Boolean).map((n) => h('option', { value: n })));
    };
    provider.addEventListener('change', fillModels);
    fillModels();
    const project = h('input', { name: 'projectPath', type: 'text', autocomplete: 'off', placeholder: '/path/to/project' });
    const mode = h('select', { name: 'permissionMode' }, MODES.map((m) => h('option', { value: m }, m)));
    const backend = h('select', { name: 'cliBackend' });
    const backendField = field('start-cli', 'CLI backend', backend);
    const title = h('input', { name: 'title', type: 'text', autocomplete: 'off', placeholder: 'optional' });
    const prompt = h('textarea', { name: 'prompt', rows: 5, required: true });
    const error = h('p', { class: 'form-error', role: 'alert' });
    const submit = h('button', { type: 'submit' }, 'Start');
    const showBackend = () => {
      const info = this.engines.find((e) => e.type === engine.value);
      backendField.hidden = engine.value !== 'cli';
      backend.required = engine.value === 'cli';
      backend.replaceChildren(
        ...(info?.backends || []).map((b) =>
          h('option', { value: b.name, disabled: !b.available }, b.available ? `${b.name}${b.version ? ` (${b.version})` : ''}` : `${b.name} — ${b.reason || 'not available'}`),
        ),
      );
    };
    engine.addEventListener('change', showBackend);
    showBackend();

    const form = h('form', { class: 'start', 'aria-labelledby': 'start-title' },
      h('h1', { id: 'start-title' }, 'New session'),
      h('div', { class: 'grid' },
        field('start-engine', 'Engine', engine),
        backendField,
        field('start-provider', 'Provider', provider),
        field('start-model', 'Model', model),
        field('start-project', 'Project directory', project, 'where tinyelf’s tools and a CLI work'),
        field('start-mode', 'Permission mode', mode),
        field('start-title', 'Title', title),
      ),
      modelList,
      field('start-prompt', 'First prompt', prompt),
      h('div', { class: 'row' }, submit),
      error,
    );
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      error.textContent = '';
      submit.disabled = true;
      const body = { engine: engine.value, prompt: prompt.value, permissionMode: mode.value, clientMsgId: clientMsgId() };
      if (provider.value) body.providerId = provider.value;
      if (model.value.trim()) body.model = model.value.trim();
      if (project.value.trim()) body.projectPath = project.value.trim();
      if (title.value.trim()) body.title = title.value.trim();
      if (engine.value === 'cli') body.cliBackend = backend.value;
      try {
        const created = await post('/v1/sessions', body);
        this.navigate(`#/s/${encodeURIComponent(created.sessionId)}`);
      } catch (err) {
        error.textContent = `Not started: ${err.message}`;
        submit.disabled = false;
      }
    });
    prompt.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit();
    });
    this.main.replaceChildren(form);
  }

  close() {}
}

// The token form. The daemon wants `Authorization: Bearer <token>` on every API call (unless it
// runs with auth = "none"); the page asks once and keeps the token in sessionStorage, which the
// tab forgets when it closes.

import { forgetToken, get, setToken } from './api.js';
import { h } from './dom.js';

/** Whether the daemon answers without a token (auth = "none"). */
export async function authIsOff() {
  const resp = await fetch('/v1/engines', { cache: 'no-store' });
  return resp.ok;
}

/** Shows the form in `main` until a token the daemon accepts is entered. */
export function askToken(main, why) {
  forgetToken();
  return new Promise((resolve) => {
    const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'current-password', required: true, spellcheck: 'false' });
    const error = h('p', { class: 'form-error', role: 'alert' }, why || '');
    const submit = h('button', { type: 'submit' }, 'Sign in');
    const form = h('form', { class: 'login', 'aria-labelledby': 'login-title' },
      h('h1', { id: 'login-title' }, 'Token'),
      h('p', {}, 'This daemon wants its bearer token. It printed it at start; it is also in the file ', h('code', {}, 'token'), ' of its data directory (', h('code', {}, 'data/token'), ' by default).'),
      h('div', { class: 'field' }, h('label', { for: 'token' }, 'Bearer token'), input),
      h('div', { class: 'row' }, submit),
      error,
    );
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      submit.disabled = true;
      error.textContent = '';
      setToken(input.value.trim());
      try {
        await get('/v1/engines', {});
        resolve();
      } catch (err) {
        forgetToken();
        error.textContent = err.status === 401 || err.status === 403 ? 'The daemon refused this token.' : `Cannot reach the daemon: ${err.message}`;
        submit.disabled = false;
        input.focus();
      }
    });
    main.replaceChildren(form);
    input.focus();
  });
}

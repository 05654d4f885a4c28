// The console's entry point: auth, then a view per route (#/ the sessions, #/new the start form,
// #/s/ID a session).

import { forgetToken, onAuthFailure, token } from './api.js';
import { askToken, authIsOff } from './auth.js';
import { SessionView } from './session.js';
import { SessionsView } from './sessions.js';
import { StartView } from './start.js';

const main = document.getElementById('main');
const noticeEl = document.getElementById('notice');
const signOut = document.getElementById('sign-out');
let view = null;
let signingIn = null;

function notice(text) {
  noticeEl.textContent = text;
  noticeEl.hidden = !text;
}

function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function route() {
  if (signingIn) return;
  view?.close();
  notice('');
  const hash = location.hash || '#/';
  const m = /^#\/s\/([^/]+)$/.exec(hash);
  if (m) view = new SessionView(main, decodeURIComponent(m[1]), { notice });
  else if (hash === '#/new') view = new StartView(main, { navigate });
  else view = new SessionsView(main);
  signOut.hidden = !token();
  view.open().catch((e) => notice(e.message));
}

async function signIn(why) {
  if (signingIn) return signingIn;
  view?.close();
  view = null;
  signOut.hidden = true;
  signingIn = askToken(main, why);
  await signingIn;
  signingIn = null;
  route();
}

onAuthFailure(() => signIn('The daemon refused the token: enter it again.'));
signOut.addEventListener('click', () => {
  forgetToken();
  signIn('');
});
window.addEventListener('hashchange', route);

async function boot() {
  if (!token() && !(await authIsOff())) {
    await signIn('');
    return;
  }
  route();
}

boot().catch((e) => notice(`Cannot reach the daemon: ${e.message}`));

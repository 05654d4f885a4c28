// The console's entry point: auth, then a view per route (#/ the sessions, #/new the start form,
// #/s/ID a session).

import { canSteer, forgetToken, onAuthFailure, token, whoAmI } from './api.js';
import { askToken, authIsOff } from './auth.js';
import { SessionView } from './session.js';
import { SessionsView } from './sessions.js';
import { StartView } from './start.js';

const main = document.getElementById('main');
const noticeEl = document.getElementById('notice');
const signOut = document.getElementById('sign-out');
const principalEl = document.getElementById('principal');
const navNew = document.getElementById('nav-new');
let view = null;
// Who the token is (GET /v1/me), or null when the daemon does not say.
let me = null;
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
  if (m) view = new SessionView(main, decodeURIComponent(m[1]), { notice, me });
  else if (hash === '#/new') view = new StartView(main, { navigate, me });
  else view = new SessionsView(main, { me });
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
  await learnWhoIAm();
  route();
}

/** Asks the daemon who the token is, and says so in the top bar. */
async function learnWhoIAm() {
  me = await whoAmI();
  principalEl.textContent = me ? `${me.user} · ${me.team} · ${me.role}` : '';
  principalEl.hidden = !me;
  navNew.hidden = !canSteer(me);
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
  await learnWhoIAm();
  route();
}

boot().catch((e) => notice(`Cannot reach the daemon: ${e.message}`));

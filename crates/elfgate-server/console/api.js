// The page's only way to the daemon: the public HTTP API, with the bearer token on every call.

const TOKEN_KEY = 'elfgate.token';

/** An answer other than 2xx, with the API's error code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code || '';
  }
}

const authListeners = new Set();

/** Called with the failed answer when the daemon refuses the token (or wants one). */
export function onAuthFailure(fn) {
  authListeners.add(fn);
}

export function authFailed(err) {
  for (const fn of authListeners) fn(err);
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t) {
  sessionStorage.setItem(TOKEN_KEY, t);
  principal = null;
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  principal = null;
}

let principal = null;

/**
 * Who the token is (GET /v1/me: user, team, role, scopes), asked once per token. Null when the
 * daemon does not say (an older one, or a refused token, which the auth listeners hear of): the
 * page then offers everything and shows the daemon's refusals.
 */
export async function whoAmI() {
  if (!principal) {
    try {
      principal = await get('/v1/me');
    } catch {
      return null;
    }
  }
  return principal;
}

/** Whether `who` may steer what it sees (prompt, stop, delete): not a viewer. */
export function canSteer(who) {
  return who?.role !== 'viewer';
}

/** Whether `who` may answer permission requests: it steers, and its key's scopes allow it. */
export function canAnswer(who) {
  return canSteer(who) && who?.scopes?.answerPermissions !== false;
}

/** Headers for an API request: the token when there is one. */
export function authHeaders(extra = {}) {
  const headers = { ...extra };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  return headers;
}

/** The API error of a failed answer. */
export async function errorOf(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch {
    // Not JSON (a proxy's page, a cut connection): the status says enough.
  }
  return new ApiError(resp.status, body?.error?.code, body?.error?.message || resp.statusText);
}

/** Whether an answer means the token is missing or wrong. */
export function isAuthRefusal(resp) {
  // A missing, unknown, expired or revoked key is 401. A 403 is a refusal of one request (a
  // viewer's prompt, a scope the key lacks): the page shows it where it happened and keeps the
  // token.
  return resp.status === 401;
}

/**
 * Calls the API: JSON in (sent as application/json, which the daemon requires), JSON out.
 * Throws ApiError for an answer other than 2xx; a refused token also tells the auth listeners.
 */
export async function api(method, path, body, { anonymous = false } = {}) {
  const headers = anonymous ? {} : authHeaders();
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (!resp.ok) {
    const err = await errorOf(resp);
    if (!anonymous && isAuthRefusal(resp)) authFailed(err);
    throw err;
  }
  if (resp.status === 204) return null;
  return resp.json();
}

export const get = (path, opts) => api('GET', path, undefined, opts);
export const post = (path, body = {}) => api('POST', path, body);

export function sessionPath(id, rest = '') {
  return `/v1/sessions/${encodeURIComponent(id)}${rest}`;
}

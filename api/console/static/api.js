// The console calls the same JSON API users call. It signs in once with the
// admin token; the server keeps the session and sets an HttpOnly cookie.
// The CSRF token lives in this module's memory only, never in storage.

let csrf = '';
export let insecure = false;

export class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `request failed with status ${status}`);
    this.status = status;
    this.code = e.code;
    this.details = e.details || [];
  }
}

// call sends one request and answers with the decoded response.
export async function call(method, path, body) {
  return (await request(method, path, body)).data;
}

// request sends one request and answers with the response both decoded
// (data) and as sent (text): JSON.parse rounds big numbers, so a page that
// shows data as written reads it from the text (dom.js rawJSON).
async function request(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') headers['X-CSRF-Token'] = csrf;
  const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!resp.ok) {
    if (resp.status === 401 && path !== '/api/console/login' && path !== '/api/console/session') {
      window.dispatchEvent(new CustomEvent('signed-out'));
    }
    throw new APIError(resp.status, data);
  }
  return { data, text };
}

export async function session() {
  try {
    const s = await call('GET', '/api/console/session');
    csrf = s.csrfToken;
    insecure = s.insecure;
    return true;
  } catch (e) {
    if (e.status === 401) {
      insecure = e.message.includes('insecure mode');
      return false;
    }
    throw e;
  }
}

export async function login(token) {
  const s = await call('POST', '/api/console/login', { token });
  csrf = s.csrfToken;
  insecure = s.insecure;
}

export async function logout() {
  await call('POST', '/api/console/logout');
  csrf = '';
}

export const get = (path) => call('GET', path);
export const getWithText = (path) => request('GET', path);
export const post = (path, body) => call('POST', path, body);
export const patch = (path, body) => call('PATCH', path, body);
export const del = (path) => call('DELETE', path);

// The public API, with the signed-in user's own token (a header, never a URL or a cookie).
const KEY = "swiftlite.console";

export const session = {
  load() { try { return JSON.parse(sessionStorage.getItem(KEY)) || null; } catch { return null; } },
  save(s) { sessionStorage.setItem(KEY, JSON.stringify(s)); },
  clear() { sessionStorage.removeItem(KEY); },
};

export class ApiError extends Error {
  constructor(status, text) { super(`${status} ${text}`.trim()); this.status = status; }
}

// Who is signed in (/console/api/session's answer, with /info): set by app.js, read by the
// pages; kept here so no page imports the shell that imports it.
let who = null;
export function me() { return who; }
export function setMe(value) { who = value; }

let onExpired = () => {};
export function whenExpired(fn) { onExpired = fn; }

// Each segment of a container or object name encoded; an object's own "/" kept.
export function pathOf(container, object) {
  let p = "/" + encodeURIComponent(container);
  if (object !== undefined) p += "/" + object.split("/").map(encodeURIComponent).join("/");
  return p;
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === false) continue;
    q.append(k, v === true ? "" : String(v));
  }
  const s = q.toString().replace(/=(&|$)/g, "$1");
  return s ? "?" + s : "";
}

// path is relative to the storage URL ("" the account, "/c", "/c/o"), or absolute ("/info").
export async function call(method, path, { headers = {}, body, params, absolute = false } = {}) {
  const s = session.load();
  if (!s) throw new ApiError(401, "not signed in");
  const base = absolute ? "" : s.storageUrl;
  const resp = await fetch(base + path + (params ? query(params) : ""), {
    method, body, headers: { "X-Auth-Token": s.token, ...headers },
    cache: "no-store", credentials: "omit",
  });
  if (resp.status === 401) { onExpired(); throw new ApiError(401, "sign in again"); }
  return resp;
}

export async function ok(resp) {
  if (resp.ok) return resp;
  const text = (await resp.text()).slice(0, 200);
  throw new ApiError(resp.status, text || resp.statusText);
}

export async function json(method, path, opts) {
  return (await ok(await call(method, path, opts))).json();
}

export async function signIn(user, key) {
  const resp = await fetch("/auth/v1.0", {
    headers: { "X-Auth-User": user, "X-Auth-Key": key }, cache: "no-store", credentials: "omit" });
  if (!resp.ok) throw new ApiError(resp.status, resp.status === 401 ? "wrong user or key" : "");
  return { token: resp.headers.get("X-Auth-Token"), storageUrl: resp.headers.get("X-Storage-Url") };
}

export async function signInS3(accessKey, secret) {
  const resp = await fetch("/console/api/s3-login", {
    method: "POST", headers: { "Content-Type": "application/json" }, credentials: "omit",
    body: JSON.stringify({ access_key: accessKey, secret }) });
  if (!resp.ok) throw new ApiError(resp.status, resp.status === 401 ? "unknown key or wrong secret" : "");
  const doc = await resp.json();
  return { token: doc.token, storageUrl: doc.storage_url };
}

// The storage URL's own path: what a temp URL signs.
export function storagePath() {
  return new URL(session.load().storageUrl, location.href).pathname;
}

export function sizeText(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// A bounded number of requests at once (thumbnails, HEADs): the page stays responsive and
// the proxy is not flooded by one tab.
export class Queue {
  constructor(width) { this.width = width; this.running = 0; this.waiting = []; this.gen = 0; }
  push(job) {
    const gen = this.gen;
    this.waiting.push(() => gen === this.gen ? job() : Promise.resolve());
    this.pump();
  }
  cancel() { this.gen++; this.waiting = []; }
  pump() {
    while (this.running < this.width && this.waiting.length) {
      const job = this.waiting.shift();
      this.running++;
      job().catch(() => {}).finally(() => { this.running--; this.pump(); });
    }
  }
}

// The console's shell: sign-in, the header, and the routes (#/, #/c/<container>, #/o/..., #/ops).
import { session, signIn, signInS3, whenExpired, ApiError, setMe } from "./api.js";
import { clear } from "./dom.js";
import { showContainers, showObjects, showObject } from "./browse.js";
import { showOps, stopOps } from "./ops.js";

const $ = (id) => document.getElementById(id);
let mode = "swift";
let who = null;  // /console/api/session's answer (also api.js's me())
let routeGen = 0;

function setMode(m) {
  mode = m;
  $("tab-swift").classList.toggle("on", m === "swift");
  $("tab-s3").classList.toggle("on", m === "s3");
  $("user-label").textContent = m === "swift" ? "User (account:user)" : "Access key";
  $("key-label").textContent = m === "swift" ? "Key" : "Secret key";
  $("login-error").textContent = "";
}

function showLogin(message = "") {
  stopOps();
  routeGen++;
  $("bar").hidden = true;
  clear($("main"));
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("login-user").focus();
}

async function loadSession() {
  const s = session.load();
  const resp = await fetch("/console/api/session", {
    headers: { "X-Auth-Token": s.token }, cache: "no-store", credentials: "omit" });
  if (!resp.ok) throw new ApiError(resp.status, "session");
  who = await resp.json();
  try {
    const info = await fetch("/info", { cache: "no-store", credentials: "omit" });
    who.info = info.ok ? await info.json() : {};
  } catch { who.info = {}; }
  setMe(who);
  $("who").textContent = who.user;
  $("nav-ops").hidden = !who.reseller_admin;
}

async function enter() {
  try {
    await loadSession();
  } catch {
    session.clear();
    return showLogin("Your session has ended: sign in again.");
  }
  $("login").hidden = true;
  $("bar").hidden = false;
  route();
}

async function route() {
  if (!session.load()) return showLogin();
  if (!who) return enter();
  stopOps();
  // Each route draws into a page of its own, shown only if no later route began meanwhile:
  // a slow answer for the page just left must not mix into the next one.
  const gen = ++routeGen;
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, q] = hash.split("?");
  const params = new URLSearchParams(q || "");
  const parts = path.split("/").slice(1);
  const main = document.createElement("div");
  main.className = "page";
  const show = () => { if (gen === routeGen) $("main").replaceChildren(main); };
  try {
    if (parts[0] === "ops") await showOps(main, who);
    else if (parts[0] === "c" && parts[1]) await showObjects(main, decodeURIComponent(parts[1]), params);
    else if (parts[0] === "o" && parts[1] && parts.length > 2)
      await showObject(main, decodeURIComponent(parts[1]), parts.slice(2).map(decodeURIComponent).join("/"));
    else await showContainers(main, params);
  } catch (err) {
    if (err.status !== 401) main.append(Object.assign(document.createElement("p"),
      { className: "error", textContent: `Could not load this page: ${err.message}` }));
  }
  show();
}

$("tab-swift").addEventListener("click", () => setMode("swift"));
$("tab-s3").addEventListener("click", () => setMode("s3"));
$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const user = $("login-user").value.trim(), key = $("login-key").value;
  $("login-submit").disabled = true;
  try {
    const s = mode === "swift" ? await signIn(user, key) : await signInS3(user, key);
    session.save(s);
    $("login-key").value = "";
    await enter();
  } catch (err) {
    $("login-error").textContent = err.status === 401 ? (mode === "swift" ? "Wrong user or key." :
      "Unknown access key or wrong secret.") : `Sign-in failed: ${err.message}`;
  } finally {
    $("login-submit").disabled = false;
  }
});
$("logout").addEventListener("click", () => {
  session.clear();
  who = null;
  setMe(null);
  location.hash = "#/";
  showLogin("Signed out.");
});
whenExpired(() => { session.clear(); who = null; setMe(null); showLogin("Your session has ended: sign in again."); });
window.addEventListener("hashchange", route);
if (session.load()) enter(); else showLogin();

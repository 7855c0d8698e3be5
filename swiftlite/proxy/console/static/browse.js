// Containers, objects (folders, a thumbnail grid for images, a table for the rest) and one
// object's page, all through the Swift API with the user's own token.
import { call, ok, json, pathOf, sizeText, storagePath, Queue, me } from "./api.js";
import { h, clear, toast, when, table, append } from "./dom.js";
import { hmacSha256Hex } from "./hmac.js";
import { uploadFiles } from "./upload.js";

const heads = new Queue(6);   // container HEADs for policy and ACL
const thumbs = new Queue(6);  // thumbnail fetches
let blobUrls = [];
let observer = null;
const PUBLIC_READ = ".r:*,.rlistings";
const THUMB = "resize:fit:256:256/format:webp/quality:75";

function forgetPage() {
  heads.cancel(); thumbs.cancel();
  if (observer) observer.disconnect();
  observer = null;
  for (const u of blobUrls) URL.revokeObjectURL(u);
  blobUrls = [];
}

function hashFor(kind, container, extra = {}) {
  const q = new URLSearchParams(Object.entries(extra).filter(([, v]) => v));
  const s = q.toString();
  return `#/${kind}/${encodeURIComponent(container)}${s ? "?" + s : ""}`;
}

function objectHash(container, name) {
  return `#/o/${encodeURIComponent(container)}/${name.split("/").map(encodeURIComponent).join("/")}`;
}

function pager(params, rows, limit, lastName, go) {
  const marker = params.get("marker") || "";
  const prev = (params.get("prev") || "").split("\n").filter((x, i, a) => a.length > 1 || x);
  return h("div", { class: "pager" },
    h("button", { type: "button", id: "page-prev", disabled: !marker,
      onclick: () => { const back = prev.slice(0, -1); go({ marker: prev[prev.length - 1] || "", prev: back.join("\n") }); } }, "‹ Previous"),
    h("span", { id: "page-info" }, `${rows} shown${marker ? ` after “${marker}”` : ""}`),
    h("button", { type: "button", id: "page-next", disabled: rows < limit,
      onclick: () => go({ marker: lastName, prev: [...prev, marker].join("\n") }) }, "Next ›"));
}

// ---- containers ---------------------------------------------------------------------------

export async function showContainers(main, params) {
  forgetPage();
  const limit = 100;
  const marker = params.get("marker") || "";
  const resp = await ok(await call("GET", "", { params: { format: "json", limit, marker } }));
  const rows = await resp.json();
  const total = [resp.headers.get("X-Account-Container-Count"), resp.headers.get("X-Account-Object-Count"),
    resp.headers.get("X-Account-Bytes-Used")];
  const policies = me().info?.swift?.policies || [];
  const nameIn = h("input", { id: "new-container", placeholder: "new container name", maxlength: 256 });
  const policyIn = policies.length > 1 ? h("select", { id: "new-policy" },
    policies.map((p) => h("option", { value: p.name, selected: p.default || false }, p.name))) : null;
  const create = async () => {
    const name = nameIn.value.trim();
    if (!name || name.includes("/")) return toast("A container name is not empty and has no “/”.");
    const headers = policyIn ? { "X-Storage-Policy": policyIn.value } : {};
    try {
      await ok(await call("PUT", pathOf(name), { headers }));
      toast(`Created ${name}`);
      location.hash = hashFor("c", name);
    } catch (err) { toast(`Could not create ${name}: ${err.message}`); }
  };
  const body = rows.map((c) => {
    const policyCell = h("td", { class: "policy" }), aclCell = h("td", { class: "acl" });
    heads.push(async () => {
      const r = await call("HEAD", pathOf(c.name));
      policyCell.textContent = r.headers.get("X-Storage-Policy") || "";
      const read = r.headers.get("X-Container-Read") || "";
      aclCell.append(h("span", { class: "pill" + (read.includes(".r:") ? " public" : "") },
        read.includes(".r:") ? "public" : read ? "shared" : "private"));
    });
    return h("tr", { dataset: { name: c.name } },
      h("td", {}, h("a", { href: hashFor("c", c.name), class: "container-link" }, c.name)),
      h("td", { class: "num" }, c.count.toLocaleString()),
      h("td", { class: "num" }, sizeText(c.bytes)),
      policyCell, aclCell, h("td", {}, when(c.last_modified)),
      h("td", { class: "actions" }, h("button", { type: "button", class: "danger",
        onclick: () => deleteContainer(c.name, () => showContainers(clear(main), params)) }, "Delete")));
  });
  append(main,
    h("h2", {}, "Containers"),
    h("p", { class: "muted" }, `${Number(total[0] || 0).toLocaleString()} containers, ` +
      `${Number(total[1] || 0).toLocaleString()} objects, ${sizeText(Number(total[2] || 0))}`),
    h("div", { class: "toolbar" }, nameIn, policyIn,
      h("button", { type: "button", class: "primary", id: "create-container", onclick: create }, "Create container")),
    table(["Name", h("th", { class: "num" }, "Objects"), h("th", { class: "num" }, "Bytes"), "Policy",
      "Access", "Last modified", ""], body, { id: "containers" }),
    pager(params, rows.length, limit, rows.length ? rows[rows.length - 1].name : "",
      (p) => { location.hash = "#/?" + new URLSearchParams(p).toString(); }));
  nameIn.addEventListener("keydown", (ev) => { if (ev.key === "Enter") create(); });
}

async function deleteContainer(name, done) {
  if (!confirm(`Delete container “${name}”?`)) return;
  let r = await call("DELETE", pathOf(name));
  if (r.status === 409) {
    if (!confirm(`“${name}” is not empty. Delete every object in it, then the container?`)) return;
    await emptyContainer(name);
    r = await call("DELETE", pathOf(name));
  }
  if (r.ok || r.status === 404) { toast(`Deleted ${name}`); done(); }
  else toast(`Could not delete ${name}: ${r.status}`);
}

async function emptyContainer(name) {
  const bulk = !!me().info?.bulk_delete;
  for (;;) {
    const rows = await json("GET", pathOf(name), { params: { format: "json", limit: 1000 } });
    if (!rows.length) return;
    if (bulk) {
      const list = rows.map((o) => encodeURIComponent(name) + "/" + o.name.split("/").map(encodeURIComponent).join("/")).join("\n");
      await ok(await call("POST", "", { params: { "bulk-delete": true }, body: list,
        headers: { "Content-Type": "text/plain", Accept: "application/json" } }));
    } else {
      await Promise.all(rows.map((o) => call("DELETE", pathOf(name, o.name))));
    }
  }
}

// ---- objects --------------------------------------------------------------------------------

function crumbs(container, prefix) {
  const out = [h("a", { href: "#/" }, "Containers"), h("span", { class: "sep" }, "/"),
    h("a", { href: hashFor("c", container) }, container)];
  let acc = "";
  for (const part of prefix.split("/").filter(Boolean)) {
    acc += part + "/";
    out.push(h("span", { class: "sep" }, "/"), h("a", { href: hashFor("c", container, { prefix: acc }) }, part));
  }
  return h("div", { class: "crumbs" }, out);
}

function loadThumb(box, container, name, bytes) {
  const variants = !!me().info?.image;
  if (!variants && bytes > 20 * 1024 * 1024) return;
  thumbs.push(async () => {
    const resp = await call("GET", pathOf(container, name), { params: variants ? { image: THUMB } : undefined });
    if (!resp.ok) { box.classList.add("failed"); return; }
    const url = URL.createObjectURL(await resp.blob());
    blobUrls.push(url);
    box.append(h("img", { src: url, alt: name, class: "thumb-img" }));
  });
}

function grid(container, images) {
  observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (!e.isIntersecting) continue;
      observer.unobserve(e.target);
      const d = e.target.dataset;
      loadThumb(e.target.querySelector(".pic"), container, d.name, Number(d.bytes));
    }
  }, { rootMargin: "300px" });
  const el = h("div", { class: "grid", id: "thumbs" }, images.map((o) => {
    const card = h("a", { class: "thumb", href: objectHash(container, o.name), dataset: { name: o.name, bytes: o.bytes } },
      h("div", { class: "pic" }), h("div", { class: "name", title: o.name }, o.name.split("/").pop()));
    observer.observe(card);
    return card;
  }));
  return el;
}

export async function showObjects(main, container, params) {
  forgetPage();
  const t0 = performance.now();
  const prefix = params.get("prefix") || "";
  const marker = params.get("marker") || "";
  const limit = Number(params.get("limit")) || 200;
  const [head, rows] = await Promise.all([
    ok(await call("HEAD", pathOf(container))),
    json("GET", pathOf(container), { params: { format: "json", limit, marker, prefix, delimiter: "/" } }),
  ]);
  const read = head.headers.get("X-Container-Read") || "";
  const isPublic = read.includes(".r:");
  const folders = rows.filter((r) => r.subdir);
  const objects = rows.filter((r) => !r.subdir);
  const images = objects.filter((o) => (o.content_type || "").startsWith("image/"));
  const others = objects.filter((o) => !(o.content_type || "").startsWith("image/"));
  const refresh = () => showObjects(clear(main), container, params);
  const go = (p) => { location.hash = hashFor("c", container, { prefix, limit: params.get("limit"), ...p }); };
  const fileIn = h("input", { type: "file", id: "file-input", multiple: true });
  fileIn.addEventListener("change", () => { uploadFiles(container, prefix, [...fileIn.files], refresh); fileIn.value = ""; });
  const drop = h("div", { class: "drop", id: "drop" }, "Drop files here to upload them",
    prefix ? ` into ${prefix}` : "", " — or ", fileIn);
  drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (ev) => {
    ev.preventDefault(); drop.classList.remove("over");
    uploadFiles(container, prefix, [...ev.dataTransfer.files], refresh);
  });
  const search = h("input", { id: "prefix", placeholder: "prefix", value: prefix });
  search.addEventListener("keydown", (ev) => { if (ev.key === "Enter") go({ prefix: search.value }); });
  const sizeSel = h("select", { id: "page-size" }, [100, 200, 500, 1000].map((n) =>
    h("option", { value: n, selected: n === limit }, `${n} a page`)));
  sizeSel.addEventListener("change", () => { location.hash = hashFor("c", container, { prefix, limit: sizeSel.value }); });
  const names = rows.map((r) => r.subdir || r.name);
  append(main,
    crumbs(container, prefix),
    h("div", { class: "toolbar" },
      h("span", { class: "pill" + (isPublic ? " public" : ""), id: "access" }, isPublic ? "public" : "private"),
      h("span", {}, `${Number(head.headers.get("X-Container-Object-Count")).toLocaleString()} objects, ` +
        sizeText(Number(head.headers.get("X-Container-Bytes-Used")))),
      h("span", {}, head.headers.get("X-Storage-Policy") ? `policy ${head.headers.get("X-Storage-Policy")}` : ""),
      h("button", { type: "button", id: "toggle-public", onclick: async () => {
        const headers = isPublic ? { "X-Remove-Container-Read": "1" } : { "X-Container-Read": PUBLIC_READ };
        try { await ok(await call("POST", pathOf(container), { headers })); toast(isPublic ? "Now private" : "Now public"); refresh(); }
        catch (err) { toast(`Could not change access: ${err.message}`); }
      } }, isPublic ? "Make private" : "Make public"),
      h("button", { type: "button", id: "container-meta", onclick: () => editMeta(main, "container", container, undefined, head.headers, refresh) }, "Metadata"),
      h("span", { class: "spacer" }), search, sizeSel),
    drop,
    folders.length ? h("ul", { class: "folders", id: "folders" }, folders.map((f) =>
      h("li", {}, h("a", { class: "folder", href: hashFor("c", container, { prefix: f.subdir, limit: params.get("limit") }) }, f.subdir.slice(prefix.length))))) : null,
    images.length ? grid(container, images) : null,
    others.length ? table(["Name", h("th", { class: "num" }, "Size"), "Type", "Last modified", ""], others.map((o) =>
      h("tr", { dataset: { name: o.name } },
        h("td", {}, h("a", { href: objectHash(container, o.name), class: "object-link" }, o.name.slice(prefix.length))),
        h("td", { class: "num" }, sizeText(o.bytes)), h("td", {}, o.content_type), h("td", {}, when(o.last_modified)),
        h("td", { class: "actions" },
          h("button", { type: "button", onclick: () => download(container, o.name) }, "Download"),
          h("button", { type: "button", class: "danger", onclick: () => deleteObject(container, o.name, refresh) }, "Delete")))),
      { id: "objects" }) : null,
    !rows.length ? h("p", { id: "empty" }, marker ? "No more objects." : "No objects here yet.") : null,
    pager(params, rows.length, limit, names[names.length - 1] || "", go));
  // What the browser test reads as "first paint": the listing laid out, thumbnails on the way.
  const ms = performance.now() - t0;
  document.body.dataset.listed = `${container}|${marker}|${rows.length}`;
  window.consoleTimings = { ...(window.consoleTimings || {}), listing: ms, rows: rows.length };
  requestAnimationFrame(() => { window.consoleTimings.paint = performance.now() - t0; });
}

async function download(container, name) {
  const resp = await call("GET", pathOf(container, name));
  if (!resp.ok) return toast(`Download failed: ${resp.status}`);
  const url = URL.createObjectURL(await resp.blob());
  const a = h("a", { href: url, download: name.split("/").pop() });
  document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

async function deleteObject(container, name, done) {
  if (!confirm(`Delete “${name}”?`)) return;
  const head = await call("HEAD", pathOf(container, name));
  const slo = head.headers.get("X-Static-Large-Object") === "True";
  const r = await call("DELETE", pathOf(container, name), { params: slo ? { "multipart-manifest": "delete" } : undefined });
  if (r.ok || r.status === 404) { toast(`Deleted ${name}`); done(); } else toast(`Could not delete: ${r.status}`);
}

// ---- metadata ---------------------------------------------------------------------------

function editMeta(main, kind, container, name, headers, done) {
  const prefix = kind === "container" ? "x-container-meta-" : "x-object-meta-";
  const existing = [...headers.entries()].filter(([k]) => k.toLowerCase().startsWith(prefix))
    .map(([k, v]) => [k.slice(prefix.length), v]);
  const rowsEl = h("tbody");
  const addRow = (k = "", v = "") => rowsEl.append(h("tr", {},
    h("td", {}, h("input", { class: "meta-key", value: k, placeholder: "name" })),
    h("td", {}, h("input", { class: "meta-value", value: v, placeholder: "value" })),
    h("td", {}, h("button", { type: "button", onclick: (ev) => ev.target.closest("tr").remove() }, "Remove"))));
  existing.forEach(([k, v]) => addRow(k, v));
  if (!existing.length) addRow();
  const save = async () => {
    const out = {};
    for (const tr of rowsEl.children) {
      const k = tr.querySelector(".meta-key").value.trim(), v = tr.querySelector(".meta-value").value;
      if (k) out[(kind === "container" ? "X-Container-Meta-" : "X-Object-Meta-") + k] = v;
    }
    if (kind === "container") {  // a container's POST merges: say what goes
      for (const [k] of existing) if (!Object.keys(out).some((x) => x.toLowerCase() === prefix + k.toLowerCase()))
        out["X-Remove-Container-Meta-" + k] = "x";
    } else {  // an object's POST replaces its metadata: keep its type
      out["Content-Type"] = headers.get("Content-Type") || "application/octet-stream";
    }
    try { await ok(await call("POST", pathOf(container, name), { headers: out })); toast("Metadata saved"); panel.remove(); done(); }
    catch (err) { toast(`Could not save: ${err.message}`); }
  };
  const panel = h("div", { class: "panel", id: "meta-editor" }, h("h3", {}, "Metadata"),
    h("table", {}, rowsEl),
    h("div", { class: "toolbar" }, h("button", { type: "button", onclick: () => addRow() }, "Add"),
      h("button", { type: "button", class: "primary", id: "meta-save", onclick: save }, "Save"),
      h("button", { type: "button", onclick: () => panel.remove() }, "Cancel")));
  main.querySelector("#meta-editor")?.remove();
  main.prepend(panel);
}

// ---- one object -------------------------------------------------------------------------

async function tempUrlKey() {
  const acct = await call("HEAD", "");
  return acct.headers.get("X-Account-Meta-Temp-URL-Key") || acct.headers.get("X-Account-Meta-Temp-Url-Key");
}

async function makeTempUrl(container, name, seconds) {
  let key = await tempUrlKey();
  if (!key) {
    if (!confirm("This account has no temp URL key yet. Create one? (Links signed with it work until it is changed.)")) return null;
    const bytes = crypto.getRandomValues(new Uint8Array(24));
    key = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    await ok(await call("POST", "", { headers: { "X-Account-Meta-Temp-URL-Key": key } }));
  }
  const expires = Math.floor(Date.now() / 1000) + seconds;
  const base = storagePath();
  const signed = `${decodeURIComponent(base)}/${container}/${name}`;
  const sig = await hmacSha256Hex(key, `GET\n${expires}\n${signed}`);
  const url = new URL(base + pathOf(container, name), location.href);
  url.search = `temp_url_sig=${sig}&temp_url_expires=${expires}`;
  return url.toString();
}

export async function showObject(main, container, name) {
  forgetPage();
  const head = await ok(await call("HEAD", pathOf(container, name)));
  const hd = head.headers;
  const type = hd.get("Content-Type") || "";
  const refresh = () => showObject(clear(main), container, name);
  const rows = [["Name", name], ["Size", `${sizeText(Number(hd.get("Content-Length")))} (${hd.get("Content-Length")} bytes)`],
    ["ETag", (hd.get("Etag") || "").replace(/"/g, "")], ["Content type", type],
    ["Last modified", hd.get("Last-Modified")], ["Created", when(Number(hd.get("X-Timestamp")))]];
  for (const k of ["X-Static-Large-Object", "X-Object-Manifest", "X-Symlink-Target", "X-Object-Version-Id", "X-Delete-At"])
    if (hd.get(k)) rows.push([k, hd.get(k)]);
  for (const [k, v] of hd.entries()) if (k.toLowerCase().startsWith("x-object-meta-")) rows.push([k.slice(14), v]);
  const expirySel = h("select", { id: "tempurl-expiry" },
    [["1 hour", 3600], ["1 day", 86400], ["7 days", 604800], ["30 days", 2592000]].map(([t, s]) => h("option", { value: s }, t)));
  const urlOut = h("input", { id: "tempurl", class: "tempurl", readonly: true, placeholder: "temp URL" });
  const preview = h("div", { class: "preview" });
  append(main,
    crumbs(container, name.includes("/") ? name.slice(0, name.lastIndexOf("/") + 1) : ""),
    h("h2", { id: "object-name" }, name.split("/").pop()),
    h("div", { class: "toolbar" },
      h("button", { type: "button", id: "download", onclick: () => download(container, name) }, "Download"),
      h("button", { type: "button", onclick: () => editMeta(main, "object", container, name, hd, refresh) }, "Metadata"),
      h("button", { type: "button", class: "danger", id: "delete-object", onclick: () => deleteObject(container, name,
        () => { location.hash = hashFor("c", container); }) }, "Delete")),
    preview,
    h("dl", { class: "meta", id: "object-meta" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("div", { class: "panel" }, h("h3", {}, "Share with a temp URL"),
      h("div", { class: "toolbar" }, "Valid for", expirySel,
        h("button", { type: "button", id: "make-tempurl", onclick: async () => {
          try {
            const url = await makeTempUrl(container, name, Number(expirySel.value));
            if (!url) return;
            urlOut.value = url;
            urlOut.select();
            try { await navigator.clipboard.writeText(url); toast("Temp URL copied"); } catch { toast("Temp URL ready"); }
          } catch (err) { toast(`Could not make a temp URL: ${err.message}`); }
        } }, "Make link")),
      urlOut));
  if (type.startsWith("image/")) {
    const variants = !!me().info?.image;
    const r = await call("GET", pathOf(container, name), { params: variants ? { image: "resize:fit:480:360/format:webp" } : undefined });
    if (r.ok) {
      const u = URL.createObjectURL(await r.blob()); blobUrls.push(u);
      preview.append(h("img", { src: u, alt: name }));
    }
  }
  const chead = await call("HEAD", pathOf(container));
  if (chead.headers.get("X-Versions-Enabled") === "True") {
    const versions = (await json("GET", pathOf(container), { params: { versions: true, prefix: name, format: "json" } }))
      .filter((v) => v.name === name);
    main.append(h("h3", {}, "Versions"), table(["Version", h("th", { class: "num" }, "Size"), "Last modified", "Latest"],
      versions.map((v) => h("tr", {}, h("td", {}, v.version_id), h("td", { class: "num" }, sizeText(v.bytes)),
        h("td", {}, when(v.last_modified)), h("td", {}, v.is_latest ? "yes" : "")))));
  }

}

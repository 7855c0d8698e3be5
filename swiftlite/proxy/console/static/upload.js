// Uploads: several files at once, each with its progress bar; a file larger than the segment
// size goes up as an SLO (segments in <container>_segments, then the manifest), as the swift
// CLI does, so no single request carries more than one segment.
import { call, ok, pathOf, session, sizeText } from "./api.js";
import { h, toast } from "./dom.js";

const DEFAULT_SEGMENT = 64 * 1024 * 1024;
const AT_ONCE = 3;

function segmentSize() {
  // An operator (or a test) may choose another size for this tab.
  return Number(sessionStorage.getItem("swiftlite.console.segment")) || DEFAULT_SEGMENT;
}

function put(path, blob, type, onProgress, params = "") {
  return new Promise((resolve, reject) => {
    const s = session.load();
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", s.storageUrl + path + params);
    xhr.setRequestHeader("X-Auth-Token", s.token);
    xhr.setRequestHeader("Content-Type", type);
    xhr.upload.onprogress = (ev) => onProgress(ev.loaded);
    xhr.onload = () => (xhr.status >= 200 && xhr.status < 300 ? resolve(xhr) :
      reject(new Error(`${xhr.status} ${xhr.responseText.slice(0, 120)}`)));
    xhr.onerror = () => reject(new Error("network error"));
    xhr.send(blob);
  });
}

async function one(container, name, file, bar, label) {
  const type = file.type || "application/octet-stream";
  const seg = segmentSize();
  bar.max = file.size || 1;
  if (file.size <= seg) {
    await put(pathOf(container, name), file, type, (n) => { bar.value = n; });
    return;
  }
  const segContainer = `${container}_segments`;
  await ok(await call("PUT", pathOf(segContainer)));
  const stamp = (Date.now() / 1000).toFixed(6);
  const manifest = [];
  let done = 0;
  for (let off = 0, i = 0; off < file.size; off += seg, i++) {
    const part = file.slice(off, Math.min(off + seg, file.size));
    const segName = `${name}/slo/${stamp}/${file.size}/${seg}/${String(i).padStart(8, "0")}`;
    label.textContent = `${name}: segment ${i + 1} of ${Math.ceil(file.size / seg)}`;
    const xhr = await put(pathOf(segContainer, segName), part, "application/octet-stream",
      (n) => { bar.value = done + n; });
    done += part.size;
    manifest.push({ path: `/${segContainer}/${segName}`, etag: (xhr.getResponseHeader("Etag") || "").replace(/"/g, ""),
      size_bytes: part.size });
  }
  label.textContent = `${name}: writing the manifest`;
  await put(pathOf(container, name), new Blob([JSON.stringify(manifest)]), type, () => {},
    "?multipart-manifest=put");
}

export async function uploadFiles(container, prefix, files, done) {
  if (!files.length) return;
  const list = document.getElementById("upload-list");
  document.getElementById("uploads").hidden = false;
  const jobs = files.map((file) => {
    const name = prefix + (file.webkitRelativePath || file.name);
    const bar = h("progress", { value: 0, max: file.size || 1 });
    const label = h("span", {}, `${name} (${sizeText(file.size)})`);
    const li = h("li", { class: "upload", dataset: { name } }, label, bar);
    list.prepend(li);
    return { file, name, bar, label, li };
  });
  let failed = 0;
  const queue = [...jobs];
  const worker = async () => {
    for (let job = queue.shift(); job; job = queue.shift()) {
      try {
        await one(container, job.name, job.file, job.bar, job.label);
        job.bar.value = job.bar.max;
        job.label.textContent = `${job.name}: done`;
        job.li.classList.add("done");
      } catch (err) {
        failed++;
        job.label.textContent = `${job.name}: failed (${err.message})`;
        job.li.classList.add("failed");
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(AT_ONCE, jobs.length) }, worker));
  toast(failed ? `${failed} of ${jobs.length} uploads failed` : `Uploaded ${jobs.length} file${jobs.length > 1 ? "s" : ""}`);
  done();
}

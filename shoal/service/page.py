"""The one HTML page of ``shoal serve`` (``GET /``): submit a script, watch it, download results.

Self-contained (no external scripts, styles or fonts). The token stays in the tab
(sessionStorage) and goes in an ``Authorization`` header, never in a URL or a cookie, so other
sites cannot make the browser act with it. Downloads are fetched with that header and handed
to the browser as a blob.
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>shoal serve</title>
<style>
body { font: 15px/1.4 system-ui, sans-serif; max-width: 60rem; margin: 1.5rem auto; padding: 0 1rem;
       color: #222; }
h1 { font-size: 1.4rem; margin: 0 0 .2rem; } h2 { font-size: 1.1rem; margin: 1.2rem 0 .4rem; }
label { display: block; margin: .6rem 0 .2rem; font-weight: 600; }
input[type=text], input[type=password], textarea { width: 100%; box-sizing: border-box;
       font: 13px/1.35 ui-monospace, monospace; padding: .35rem; }
textarea#script { height: 12rem; } textarea#args { height: 3.2rem; }
button { margin: .6rem .4rem 0 0; padding: .35rem .9rem; }
pre#log { background: #111; color: #ddd; padding: .6rem; height: 14rem; overflow: auto;
          white-space: pre-wrap; font-size: 12px; }
#state { font-weight: 700; } .failed, .cancelled, .error { color: #b00020; }
.succeeded { color: #18794e; } table { border-collapse: collapse; }
td { padding: .1rem .6rem .1rem 0; font: 13px ui-monospace, monospace; }
.muted { color: #666; font-size: 13px; }
</style></head>
<body>
<h1>shoal serve</h1>
<p class="muted">Send a shell script of NCO/coreutils commands; it runs next to the data, in a
sandbox, and you download only its results. Scripts read the data directory by the paths listed
under <em>Data</em>; they write their outputs into their own working directory.</p>
<label for="token">Token</label>
<input type="password" id="token" autocomplete="off" placeholder="your token">
<label for="script">Script</label>
<textarea id="script" spellcheck="false">#!/bin/bash
set -e
</textarea>
<label for="args">Arguments (one per line)</label>
<textarea id="args" spellcheck="false"></textarea>
<label for="inputs">Input files (optional)</label>
<input type="file" id="inputs" multiple>
<div><button id="submit">Run</button><button id="cancel" disabled>Cancel</button>
<button id="showdata">Data</button></div>
<p id="error" class="error"></p>
<h2>Job <span id="jobid"></span></h2>
<p>State: <span id="state">-</span> <span id="progress" class="muted"></span>
<span id="reason" class="muted"></span></p>
<pre id="log"></pre>
<h2>Outputs</h2>
<table id="outputs"></table>
<div><button id="archive" disabled>Download all (zip)</button></div>
<h2>Data</h2>
<table id="data"></table>
<script>
"use strict";
const API = "/api/v1";
const $ = (id) => document.getElementById(id);
let job = null, logOffset = 0, timer = null;
$("token").value = sessionStorage.getItem("shoal-token") || "";
function token() { const t = $("token").value.trim(); sessionStorage.setItem("shoal-token", t); return t; }
async function api(path, opts = {}) {
  opts.headers = Object.assign({"Authorization": "Bearer " + token()}, opts.headers || {});
  const r = await fetch(API + path, opts);
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { msg = (await r.json()).error || msg; } catch (e) {}
    throw new Error(msg);
  }
  return r;
}
function showError(e) { $("error").textContent = e ? String(e.message || e) : ""; }
function fmtSize(n) { const u = ["B", "KiB", "MiB", "GiB"]; let i = 0;
  while (n >= 1024 && i < 3) { n /= 1024; i++; } return (i ? n.toFixed(1) : n) + " " + u[i]; }
async function download(path, name) {
  try {
    const blob = await (await api(path)).blob();
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob); a.download = name; document.body.appendChild(a);
    a.click(); a.remove(); setTimeout(() => URL.revokeObjectURL(a.href), 60000);
  } catch (e) { showError(e); }
}
$("submit").onclick = async () => {
  showError(null);
  const fd = new FormData();
  fd.append("script", new Blob([$("script").value], {type: "text/x-shellscript"}), "job.sh");
  for (const a of $("args").value.split("\\n")) { if (a !== "") fd.append("arg", a); }
  for (const f of $("inputs").files) fd.append("input", f, f.name);
  try {
    const j = await (await api("/jobs", {method: "POST", body: fd})).json();
    job = j.id; logOffset = 0; $("log").textContent = ""; $("outputs").innerHTML = "";
    $("jobid").textContent = job; $("cancel").disabled = false; $("archive").disabled = true;
    render(j); clearTimeout(timer); poll();
  } catch (e) { showError(e); }
};
$("cancel").onclick = async () => { try { render(await (await api("/jobs/" + job + "/cancel",
  {method: "POST"})).json()); } catch (e) { showError(e); } };
$("archive").onclick = () => download("/jobs/" + job + "/archive?format=zip", "job-" + job + ".zip");
$("showdata").onclick = async () => {
  showError(null);
  try {
    const d = await (await api("/data")).json(); const t = $("data"); t.innerHTML = "";
    for (const e of d.entries) { const r = t.insertRow();
      r.insertCell().textContent = e.path; r.insertCell().textContent = e.type === "dir" ? "dir" : fmtSize(e.size); }
  } catch (e) { showError(e); }
};
function render(j) {
  $("state").textContent = j.state; $("state").className = j.state;
  $("progress").textContent = j.progress ? "(" + j.progress.done + " of " + j.progress.total + " commands)" : "";
  $("reason").textContent = j.reason ? "- " + j.reason : "";
}
async function poll() {
  if (!job) return;
  const id = job;
  try {
    const j = await (await api("/jobs/" + id)).json();
    const r = await api("/jobs/" + id + "/log?offset=" + logOffset);
    const text = await r.text();
    if (id !== job) return;
    logOffset = parseInt(r.headers.get("X-Log-Offset") || logOffset, 10);
    if (text) { $("log").textContent += text; $("log").scrollTop = $("log").scrollHeight; }
    render(j);
    if (["succeeded", "failed", "cancelled"].includes(j.state)) {
      if (j.log_bytes > logOffset) { timer = setTimeout(poll, 50); return; }
      $("cancel").disabled = true; await outputs(id); return;
    }
  } catch (e) { showError(e); }
  timer = setTimeout(poll, 700);
}
async function outputs(id) {
  const o = await (await api("/jobs/" + id + "/outputs")).json();
  const t = $("outputs"); t.innerHTML = "";
  for (const f of o.files) {
    const r = t.insertRow(); const a = document.createElement("a");
    a.href = "#"; a.className = "download"; a.textContent = f.name; a.dataset.name = f.name;
    a.onclick = (ev) => { ev.preventDefault(); download("/jobs/" + id + "/outputs/" + f.name,
                                                        f.name.split("/").pop()); };
    r.insertCell().appendChild(a); r.insertCell().textContent = fmtSize(f.size);
  }
  $("archive").disabled = o.files.length === 0;
}
</script>
</body></html>
"""

// agentwork console: the live part and small enhancements. Every page
// works without this file; with it, new runs appear in the runs list as
// they end (over the server's event stream), and delete buttons ask first.
(function () {
  "use strict";

  // Forms that ask before they submit (data-confirm).
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { e.preventDefault(); }
  });

  var table = document.getElementById("runs");
  if (!table || !table.dataset.live || !window.EventSource) { return; }
  var body = table.tBodies[0];
  var seen = {};
  Array.prototype.forEach.call(body.querySelectorAll("a[href^='/runs/']"), function (a) {
    seen[a.getAttribute("href").slice(6)] = true;
  });
  var hint = document.getElementById("live");

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }
  function when(iso) {
    var d = new Date(iso);
    return isNaN(d) ? iso : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }
  function cut(s, n) {
    s = (s || "").replace(/\s+/g, " ").trim();
    return s.length > n ? s.slice(0, n) + "\u2026" : s;
  }
  function summary(r) {
    if (r.outcome === "skip") { return "skipped: " + [r.reason, r.detail].filter(Boolean).join(": "); }
    if (r.outcome === "error") { return (r["class"] || "") + " error: " + (r.error || ""); }
    return r.text || r.reply || "";
  }

  // The console's /events is the API's event stream with every event
  // unnamed, so one message listener sees them all.
  var es = new EventSource(table.dataset.live);
  es.addEventListener("open", function () { if (hint) { hint.hidden = false; } });
  es.addEventListener("error", function () { if (hint) { hint.hidden = true; } });
  es.addEventListener("message", function (msg) {
    var ev;
    try { ev = JSON.parse(msg.data); } catch (err) { return; }
    if (!ev || !ev.id || seen[ev.id] || !ev.data) { return; }
    seen[ev.id] = true;
    var r = ev.data;
    var tr = document.createElement("tr");
    tr.className = "new";
    var a = document.createElement("a");
    a.href = "/runs/" + encodeURIComponent(ev.id);
    a.textContent = when(ev.time);
    cell(tr, "").appendChild(a);
    cell(tr, r.source || "");
    cell(tr, r.name || "");
    var span = document.createElement("span");
    span.className = "outcome " + String(r.outcome || "").replace(/[^a-z_]/g, "");
    span.textContent = r.outcome || "";
    cell(tr, "").appendChild(span);
    cell(tr, cut(summary(r), 140), "summary");
    body.insertBefore(tr, body.firstChild);
    var empty = document.getElementById("runs-empty");
    if (empty) { empty.hidden = true; }
  });
})();

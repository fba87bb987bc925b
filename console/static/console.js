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

// ---------------------------------------------------------------------
// The job form: checks as you type. ~300 ms after the last keystroke the
// form is sent to POST /jobs/check, which runs the API's own checks of
// the save (a dry run: nothing is saved) and the scheduler's parser for
// the next fire times; each error shows under its field, the fire times
// in the job's zone. What the server says is inserted as text only. With
// this script off the form works as before ("Show fire times").
(function () {
  "use strict";
  var form = document.getElementById("job-form");
  if (!form || !form.dataset.check || !window.fetch || !window.URLSearchParams || !window.FormData) { return; }
  var fields = ["id", "schedule", "timezone", "prompt", "targets", "tools", "model"];
  var touched = {};
  fields.forEach(function (name) {
    // A field the server already marked counts as touched.
    if (document.getElementById("e-" + name)) { touched[name] = true; }
  });
  var url = form.dataset.check + (form.dataset.edit ? "?edit=" + encodeURIComponent(form.dataset.edit) : "");
  var timer = null;
  var seq = 0;

  function input(name) { return document.getElementById("f-" + name); }

  // showError sets (or, with no text, clears) the error under field name.
  function showError(name, text) {
    var el = input(name);
    if (!el) { return; }
    var span = document.getElementById("e-" + name);
    if (!text) {
      if (span) { span.parentNode.removeChild(span); }
      el.removeAttribute("aria-invalid");
      el.removeAttribute("aria-describedby");
      return;
    }
    if (!span) {
      span = document.createElement("span");
      span.className = "error-text";
      span.id = "e-" + name;
      el.parentNode.appendChild(span);
    }
    span.textContent = text;
    el.setAttribute("aria-invalid", "true");
    el.setAttribute("aria-describedby", span.id);
  }

  function showFires(c) {
    var title = document.getElementById("fires-title");
    var box = document.getElementById("fires-list");
    if (!title || !box) { return; }
    title.textContent = c.title || "";
    while (box.firstChild) { box.removeChild(box.firstChild); }
    var p;
    if (c.next && c.next.length) {
      var ol = document.createElement("ol");
      c.next.forEach(function (t) {
        var li = document.createElement("li");
        li.textContent = t;
        ol.appendChild(li);
      });
      box.appendChild(ol);
      p = document.createElement("p");
      p.className = "hint";
      p.textContent = "A job's jitter, if set, moves each by up to that much.";
    } else {
      p = document.createElement("p");
      p.className = "muted";
      p.textContent = c.note || "No fire times: see the schedule's error.";
    }
    box.appendChild(p);
  }

  function show(c) {
    var errors = c.errors || {};
    fields.forEach(function (name) {
      var el = input(name);
      var shown = touched[name] || (el && el.value.trim() !== "");
      showError(name, shown ? errors[name] : "");
    });
    var other = document.getElementById("check-other");
    if (other) {
      other.textContent = c.other || "";
      other.hidden = !c.other;
    }
    showFires(c);
  }

  function check() {
    var n = ++seq;
    var body = new URLSearchParams(new FormData(form));
    fetch(url, {
      method: "POST", body: body, credentials: "same-origin", redirect: "error",
      headers: { "Accept": "application/json" }
    }).then(function (res) {
      var ct = res.headers.get("Content-Type") || "";
      if (!res.ok || ct.indexOf("application/json") !== 0) { throw new Error("check: " + res.status); }
      return res.json();
    }).then(function (c) {
      if (n === seq) { show(c); } // a later check is on its way
    })["catch"](function () { /* the form still works: Show fire times */ });
  }

  form.addEventListener("input", function (e) {
    var name = e.target && e.target.name;
    if (fields.indexOf(name) < 0) { return; }
    touched[name] = true;
    if (timer) { clearTimeout(timer); }
    timer = setTimeout(check, 300);
  });
})();

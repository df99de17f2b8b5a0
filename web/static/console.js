// The console's only script (the page allows no inline script). It keeps
// the page live from the agent's event stream by patching just the rows an
// event names (a streaming turn sends many events; each refetches one row,
// at most every 150 ms), keeps the pill's counts and the unread dot, ticks
// elapsed times, and shows an action's refusal in its row. htmx does the
// buttons.
document.addEventListener("DOMContentLoaded", function () {
  var body = document.body;
  var list = document.getElementById("jobs") || document.getElementById("members");
  var dot = document.getElementById("unread");
  var pill = document.getElementById("pill");
  var as = body.dataset.as || "";
  var pending = {};

  function recount() {
    if (!pill || !list) { return; }
    var q = list.querySelectorAll(".job.queued").length, r = list.querySelectorAll(".job.running").length;
    document.getElementById("queued-count").textContent = q;
    document.getElementById("running-count").textContent = r;
    pill.classList.toggle("busy", q + r > 0);
  }

  function patch(id) {
    if (pending[id]) { return; }
    pending[id] = setTimeout(function () {
      delete pending[id];
      var row = document.getElementById("job-" + id);
      if (row) {
        htmx.ajax("GET", "/console/jobs/" + id + as, { target: row, swap: "outerHTML" }).then(recount);
      } else if (list && list.id === "jobs" && !body.dataset.filtered) {
        var empty = list.querySelector(".empty");
        if (empty) { empty.remove(); }
        htmx.ajax("GET", "/console/jobs/" + id + as, { target: list, swap: "afterbegin" }).then(recount);
      }
    }, 150);
  }

  if (list && window.EventSource) {
    var src = new EventSource("/v1/events" + (body.dataset.agent ? "?agent=" + encodeURIComponent(body.dataset.agent) : ""));
    src.onopen = function () { body.dataset.live = "1"; };
    ["background.started", "background.running", "background.progress", "background.completed", "background.resumed", "background.resume_failed", "batch.joined"].forEach(function (type) {
      src.addEventListener(type, function (e) {
        var data;
        try { data = JSON.parse(e.data); } catch (_) { return; }
        if (body.dataset.agent && data.agent && data.agent !== body.dataset.agent) { return; }
        if (type === "background.completed" && dot) { dot.hidden = false; }
        if (data.job_id) { patch(data.job_id); }
        body.dispatchEvent(new CustomEvent("bgjobs:changed"));
      });
    });
  }
  document.body.addEventListener("htmx:afterSettle", recount);
  document.body.addEventListener("htmx:responseError", function (e) {
    var msg = "refused";
    try { msg = JSON.parse(e.detail.xhr.responseText).error.message; } catch (_) {}
    var row = e.detail.elt.closest(".job");
    if (row) {
      var p = document.createElement("p");
      p.className = "error action-error";
      p.textContent = msg;
      row.appendChild(p);
    }
  });

  function clear() { if (dot) { dot.hidden = true; } }
  if (list) { list.addEventListener("click", clear); list.addEventListener("focusin", clear); }
  if (pill) { pill.addEventListener("click", clear); }

  var agent = document.getElementById("agent");
  if (agent) { agent.addEventListener("change", function () { agent.form.submit(); }); }

  setInterval(function () {
    document.querySelectorAll(".elapsed[data-since]").forEach(function (el) {
      var s = Math.max(0, Math.round((Date.now() - Date.parse(el.dataset.since)) / 1000));
      el.textContent = s < 60 ? s + "s" : Math.floor(s / 60) + "m" + (s % 60) + "s";
    });
  }, 1000);
});

// The console's only script (the page allows no inline script): the unread
// dot and live elapsed times. htmx and its SSE extension do the rest.
document.addEventListener("DOMContentLoaded", function () {
  var dot = document.getElementById("unread");
  var list = document.getElementById("jobs");
  document.body.addEventListener("htmx:sseMessage", function (e) {
    if (e.detail && e.detail.type === "background.completed" && dot) { dot.hidden = false; }
  });
  function clear() { if (dot) { dot.hidden = true; } }
  if (list) { list.addEventListener("click", clear); list.addEventListener("focusin", clear); }
  var pill = document.getElementById("pill");
  if (pill) { pill.addEventListener("click", clear); }
  document.body.addEventListener("htmx:afterSwap", function () {
    var n = document.getElementById("running-count");
    if (pill && n) { pill.classList.toggle("busy", n.textContent.trim() !== "0"); }
  });
  setInterval(function () {
    document.querySelectorAll(".elapsed[data-since]").forEach(function (el) {
      var s = Math.max(0, Math.round((Date.now() - Date.parse(el.dataset.since)) / 1000));
      el.textContent = s < 60 ? s + "s" : Math.floor(s / 60) + "m" + (s % 60) + "s";
    });
  }, 1000);
});

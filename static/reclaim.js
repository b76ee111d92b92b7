// jupyterhub-gpu-reclaim: small enhancements; every page works without this script.
(function () {
  "use strict";
  // framed in a hub page (the home page's panel, the warning banner): wear the hub page's
  // theme, also when the user toggles it there (the hub's darkmode.js sets data-bs-theme)
  try {
    var outer = window.parent !== window && window.parent.document.documentElement;
    if (outer) {
      var follow = function () {
        var theme = outer.getAttribute("data-bs-theme");
        if (theme) document.documentElement.setAttribute("data-bs-theme", theme);
      };
      follow();
      new MutationObserver(follow).observe(outer, { attributes: true, attributeFilter: ["data-bs-theme"] });
    }
  } catch (e) { /* a parent of another origin: the page keeps its own theme */ }
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  // each time in the browser's zone, written as the server writes it in UTC (wording.clock):
  // "08:33" today, "2026-12-05 08:33" on another day. The server wrote UTC on hover and
  // how soon or how long ago beside it (one computation for every page and notice).
  var today = new Date().toDateString();
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (isNaN(d)) return;
    var clock = pad(d.getHours()) + ":" + pad(d.getMinutes());
    el.textContent = d.toDateString() === today ? clock
      : d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + clock;
  });
  // the keep-alive time field is in the browser's zone: tell the server which
  document.querySelectorAll("input.tz-offset").forEach(function (el) { el.value = String(new Date().getTimezoneOffset()); });
  document.querySelectorAll(".tz").forEach(function (el) {
    try { el.textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time"; } catch (e) { el.textContent = "local time"; }
  });
  // confirmations for destructive user actions (admin actions confirm on a page of their own)
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) { if (!window.confirm(form.getAttribute("data-confirm"))) ev.preventDefault(); });
  });
  // sortable tables: click a header
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th, i) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var dir = th.getAttribute("data-dir") === "asc" ? -1 : 1;
        th.setAttribute("data-dir", dir === 1 ? "asc" : "desc");
        rows.sort(function (a, b) {
          var x = a.cells[i].textContent.trim(), y = b.cells[i].textContent.trim();
          var nx = parseFloat(x), ny = parseFloat(y);
          if (!isNaN(nx) && !isNaN(ny)) return (nx - ny) * dir;
          return x.localeCompare(y) * dir;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  // filters
  document.querySelectorAll("input.table-filter").forEach(function (input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    input.addEventListener("input", function () {
      var q = input.value.toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        r.style.display = r.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
      });
    });
  });
})();

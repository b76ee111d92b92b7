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
  // each time in the browser's zone (localtime.js: the one rule, shared with JupyterLab); the
  // server wrote UTC on hover and how soon or how long ago beside it (one computation for
  // every page and notice)
  var localTimes = window.gpuReclaimLocalTimes || function () {};
  localTimes(document);
  // the keep-alive time field is in the browser's zone: tell the server which
  document.querySelectorAll("input.tz-offset").forEach(function (el) { el.value = String(new Date().getTimezoneOffset()); });
  document.querySelectorAll(".tz").forEach(function (el) {
    try { el.textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time"; } catch (e) { el.textContent = "local time"; }
  });
  // confirmations for destructive user actions (admin actions confirm on a page of their own)
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) { if (!window.confirm(form.getAttribute("data-confirm"))) ev.preventDefault(); });
  });
  // sortable tables: each header's button sorts by the cells' data-sort (the value the server
  // wrote: a number where the header says data-type="number", seconds for a time), ascending
  // then descending; the header says which with aria-sort. The order holds across refreshes.
  var sorted = {};  // table id -> [column, 1 or -1]
  function sortTable(table, i, dir) {
    var number = table.tHead.rows[0].cells[i].getAttribute("data-type") === "number";
    var key = function (row) {
      var cell = row.cells[i], v = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
      return number ? (v === "" ? NaN : Number(v)) : v;
    };
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (number) {
        if (isNaN(x) || isNaN(y)) return isNaN(x) - isNaN(y);  // no value: last either way
        return (x - y) * dir;
      }
      return x.localeCompare(y) * dir;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, k) {
      if (k === i) th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    });
    sorted[table.id] = [i, dir];
  }
  function sortable(root) {
    root.querySelectorAll("table.sortable").forEach(function (table) {
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
        var button = th.querySelector("button.sort");
        if (!button) return;
        button.addEventListener("click", function () {
          sortTable(table, i, th.getAttribute("aria-sort") === "ascending" ? -1 : 1);
        });
      });
      var was = sorted[table.id];
      if (was) sortTable(table, was[0], was[1]);
    });
  }
  sortable(document);
  // filters (again after a refresh)
  function filter(input) {
    var table = document.getElementById(input.getAttribute("data-table")), q = input.value.toLowerCase();
    if (!table) return;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      r.style.display = r.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
    });
  }
  var filters = document.querySelectorAll("input.table-filter");
  filters.forEach(function (input) { input.addEventListener("input", function () { filter(input); }); });
  // live parts (the admin page): the page is fetched again every data-refresh-s seconds and
  // each [data-live] part replaced by the new one, so its numbers and states are the latest
  // cycle's and its age ("as of 13:20 (12 s ago)") is the server's. Not while the page is
  // hidden; details left open stay open.
  var head = document.querySelector("[data-refresh-s]");
  if (head && window.fetch && window.DOMParser) {
    var every = 1000 * Number(head.getAttribute("data-refresh-s"));
    var refresh = function () {
      // not while the reader is on a control in a live part (typing hours, on a row's
      // button): only a header's sort button is given back after the swap
      var active = document.activeElement;
      var busy = active && active.closest("[data-live]") && !active.matches("th button.sort");
      if (document.hidden || busy) return;
      // the hub's login cookie is taken from a script's request only with the page's XSRF
      // token; a redirect (to log in again) is not followed: reloading the page does that
      var xsrf = document.querySelector("input[name=_xsrf]");
      fetch(window.location.pathname, { credentials: "same-origin", redirect: "manual",
                                        headers: { Accept: "text/html", "X-XSRFToken": xsrf ? xsrf.value : "" } })
        .then(function (r) {
          if (r.type === "opaqueredirect") throw new Error("logged out? reload the page");
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          if (!doc.querySelector("[data-refresh-s]")) throw new Error("not the admin page");
          document.querySelectorAll("[data-live]").forEach(function (old) {
            var fresh = doc.getElementById(old.id);
            if (!fresh) return;
            var open = Array.prototype.map.call(old.querySelectorAll("details[open]"), function (d) {
              var row = d.closest("[data-session]");
              return row ? row.getAttribute("data-session") : null;
            });
            var focused = old.contains(document.activeElement) && document.activeElement.closest("th");
            fresh = document.importNode(fresh, true);
            fresh.querySelectorAll("details").forEach(function (d) {
              var row = d.closest("[data-session]");
              if (row && open.indexOf(row.getAttribute("data-session")) >= 0) d.open = true;
            });
            old.replaceWith(fresh);
            localTimes(fresh);
            sortable(fresh);
            if (focused) {  // a header's sort button had the focus: give it to the new one
              var th = fresh.querySelectorAll("thead th")[focused.cellIndex];
              if (th && th.querySelector("button")) th.querySelector("button").focus();
            }
          });
          filters.forEach(filter);
        })
        .catch(function (e) {
          var state = document.querySelector("#headline .refresh-state");
          if (state) state.textContent = " — not updated: " + e.message;
        });
    };
    setInterval(refresh, every);
  }
})();

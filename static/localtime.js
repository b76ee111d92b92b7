// jupyterhub-gpu-reclaim: the one rule for a time a person reads, in the browser's zone. The
// server writes each time as <time datetime="ISO 8601"> with its UTC text ("13:33 UTC",
// wording.clock) and the UTC time on hover; this writes the same in the reader's zone:
// "08:33" today, "2026-12-05 08:33" on another day. Used by the service's pages (reclaim.js,
// loaded before it) and bundled into the JupyterLab extension (labextension/src/stopped.ts),
// so that both read alike.
(function (root, factory) {
  if (typeof module === "object" && module.exports) module.exports = factory();
  else root.gpuReclaimLocalTimes = factory().localTimes;
})(this, function () {
  "use strict";
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function localTimes(root) {
    var today = new Date().toDateString();
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      var clock = pad(d.getHours()) + ":" + pad(d.getMinutes());
      el.textContent = d.toDateString() === today ? clock
        : d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + clock;
    });
  }
  return { localTimes: localTimes };
});

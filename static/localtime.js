// jupyterhub-gpu-reclaim: the one rule for a time a person reads, in the browser's zone. The
// server writes each time as <time datetime="ISO 8601"> with its UTC text ("13:33 UTC",
// wording.clock) and the UTC time on hover; this writes the same in the reader's zone:
// "08:33" today, "2026-12-05 08:33" on another day. Used by the service's pages (reclaim.js,
// loaded before it) and bundled into the JupyterLab extension (its status bar, notification
// and after-stop dialog), so that both read alike.
(function (root, factory) {
  if (typeof module === "object" && module.exports) module.exports = factory();
  else root.gpuReclaimLocalTimes = factory().localTimes;
})(this, function () {
  "use strict";
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function localClock(d) {
    var clock = pad(d.getHours()) + ":" + pad(d.getMinutes());
    return d.toDateString() === new Date().toDateString() ? clock
      : d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + clock;
  }
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) el.textContent = localClock(d);
    });
  }
  return { localTimes: localTimes, localClock: localClock };
});

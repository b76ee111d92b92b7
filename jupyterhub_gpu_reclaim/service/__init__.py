"""The reclaim service's running parts: `cycle` (the `Reclaimer`: observe, decide, act, each
cycle) and its types (`cycle_types`), the samples it keeps (`history`), the stops (`stops`,
through `hub_stopper`: the hub's REST API), what the pages show (`status`, `usage`), the
notices (`notify`) and its metrics (`metrics`). What it reads comes from `..signals`; what it
keeps goes to `..store`."""

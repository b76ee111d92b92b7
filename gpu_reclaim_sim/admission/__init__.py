"""What the simulated apiserver does to an object between decoding it and storing it:
`pipeline` runs the steps, `schema` decodes, `validation` holds the shared rules, and
one module per kind (`pods`, `storage`, `services`, `workloads`, `objects`) its defaulting,
admission plugins and validation."""

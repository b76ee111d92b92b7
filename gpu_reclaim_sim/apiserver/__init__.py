"""kube-apiserver: the REST API over HTTP (`server`), discovery, watches, tables, protobuf bodies,
patches, writes, lists and their compression, pod logs."""

"""The cluster network: addresses, kube-proxy (nftables mode and a userspace one), NetworkPolicy,
the run's network namespace, pods' sockets, relays in and out of it."""

"""The cluster network: addresses, kube-proxy (nftables mode and a userspace one), NetworkPolicy,
pods' network namespaces, load balancers, the `kubernetes` Service."""

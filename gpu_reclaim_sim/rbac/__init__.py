"""Authorization as kube-apiserver does it with `--authorization-mode=RBAC`.

Its modules: `authorizer` (`request_attributes`, `Authorizer`, `forbidden`), `escalation`
(`confirm_no_escalation`), `validation` (what admission checks of RBAC objects), `defaults`
(`bootstrap`, `RoleAggregator`) and `reviews` (access reviews).

- `request_attributes`: the request's attributes as the apiserver's RequestInfoFactory
  computes them (verb from the method, `list`/`watch`/`deletecollection` for collections,
  the `/watch/` prefix, a `metadata.name` field selector naming the object, the
  namespace of `/namespaces/NS/...`, subresources; other paths are non-resource URLs).
- `Authorizer`: `system:masters` is always allowed (the privileged-groups authorizer in
  front of RBAC); then Roles, ClusterRoles, RoleBindings and ClusterRoleBindings are
  evaluated as the RBAC authorizer does (verbs and `*`, apiGroups and `*`, resources,
  `*`, `resource/subresource` and `*/subresource`, resourceNames, nonResourceURLs with a
  trailing `*`; User, Group and ServiceAccount subjects). Bindings are indexed by subject
  and the index is rebuilt only when an RBAC object changes, so a check is a few dict
  look-ups.
- `forbidden`: the 403 `Status` in the apiserver's words.
- `confirm_no_escalation`: creating or updating a Role or ClusterRole needs every
  permission it grants (or `escalate`); a binding needs the permissions of its role (or
  `bind` on it); `system:masters` may do anything.
- `bootstrap`: the default ClusterRoles and ClusterRoleBindings a cluster starts with that
  clients rely on (cluster-admin, admin/edit/view aggregated from
  `system:aggregate-to-*`, system:basic-user, system:discovery,
  system:public-info-viewer), and `RoleAggregator`, the controller that fills an
  aggregated ClusterRole's rules from the ClusterRoles its `aggregationRule` selects.
- Access reviews: SelfSubjectAccessReview (`kubectl auth can-i`), SubjectAccessReview,
  LocalSubjectAccessReview, SelfSubjectRulesReview (`kubectl auth can-i --list`) and
  SelfSubjectReview (`kubectl auth whoami`)."""
